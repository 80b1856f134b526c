#include "testsaga.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "testdb.h"

void testsaga_create_effects(struct txo_db *db)
{
    testdb_exec(db, "CREATE TABLE effects ("
                    "  saga_id CHAR(36) NOT NULL, step VARCHAR(32) NOT NULL,"
                    "  kind VARCHAR(32) NOT NULL, n INT NOT NULL DEFAULT 1,"
                    "  PRIMARY KEY (saga_id, step, kind)) ENGINE=InnoDB");
}

void testsaga_worker_opts(struct txo_saga_opts *o, const struct txo_clock *clock,
                          int64_t backoff_max_ms)
{
    txo_saga_opts_init(o);
    o->owner = "worker-1";
    o->step_max_attempts = 3;
    o->step_backoff.base_ms = 10;
    o->step_backoff.max_ms = backoff_max_ms;
    o->step_backoff.jitter = 0;
    o->clock = clock;
}

int testsaga_effect(struct txo_tx *tx, const struct txo_saga_ctx *ctx, const char *kind,
                    struct txo_error *err)
{
    struct txo_param p[] = {txo_p_str(ctx->saga_id), txo_p_str(ctx->step_name), txo_p_str(kind)};
    return txo_tx_exec(tx,
                       "INSERT INTO effects (saga_id, step, kind) VALUES (?, ?, ?) "
                       "ON DUPLICATE KEY UPDATE n = n + 1",
                       p, 3, NULL, err);
}

int testsaga_undo(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    return testsaga_effect(tx, ctx, "undo", err);
}

int64_t testsaga_effects(struct txo_db *db, const char *saga_id, const char *step, const char *kind)
{
    struct txo_param p[] = {txo_p_str(saga_id), txo_p_str(step), txo_p_str(kind)};
    return testdb_i64(db,
                      "SELECT COALESCE(SUM(n), 0) FROM effects WHERE saga_id = ? AND step = ? "
                      "AND kind = ?",
                      p, 3);
}

char *testsaga_step_col(struct txo_db *db, const char *saga_id, int step, const char *col)
{
    char sql[160];
    snprintf(sql, sizeof(sql),
             "SELECT CAST(%s AS CHAR) FROM saga_steps WHERE saga_id = ? AND step_order = ?", col);
    struct txo_param p[] = {txo_p_str(saga_id), txo_p_i64(step)};
    return testdb_str(db, sql, p, 2);
}

void testsaga_assert_step(struct txo_db *db, const char *saga_id, int step, const char *status,
                          const char *remote)
{
    char *s = testsaga_step_col(db, saga_id, step, "status");
    char *r = testsaga_step_col(db, saga_id, step, "remote_state");
    if (s == NULL || r == NULL || strcmp(s, status) != 0 || strcmp(r, remote) != 0)
        fail_msg("step %d is %s/%s, want %s/%s", step, s != NULL ? s : "NULL",
                 r != NULL ? r : "NULL", status, remote);
    txo_free(s);
    txo_free(r);
}

int testsaga_each(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                  struct txo_error *errs, testsaga_one_fn one)
{
    for (size_t k = 0; k < n; k++) {
        txo_error_init(&errs[k]);
        rcs[k] = n > 1 ? txo_error_set(&errs[k], TXO_EALONE, "a toy step runs saga by saga")
                       : one(tx, ctx[k], &errs[k]);
    }
    return 0;
}

void testsaga_each_remote(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                          struct txo_error *errs, testsaga_remote_one_fn one)
{
    for (size_t k = 0; k < n; k++) {
        txo_error_init(&errs[k]);
        rcs[k] = one(ctx[k], &errs[k]);
    }
}
