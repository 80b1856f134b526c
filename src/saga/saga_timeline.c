/*
 * The times of a saga and its steps for the operator's saga page (saga_timeline.h). One
 * consistent read (SAGA_SQL_TIMELINE); nothing here writes or takes a lease.
 *
 * Thread-safety: uses only the db it is given.
 */
#include "core/common.h"

#include "core/text.h"
#include "saga/saga_sql.h"
#include "saga/saga_timeline.h"

/* Columns of SAGA_SQL_TIMELINE. */
enum timeline_col {
    COL_CREATED_AT,
    COL_UPDATED_AT,
    COL_DEADLINE_AT,
    COL_STEP_ORDER,
    COL_STEP_UPDATED_AT,
    COL_STEP_DEADLINE_AT,
    COL_STEP_TRY_DEADLINE,
};

static void time_col(const struct txo_rows *rows, size_t i, size_t col, char out[TXO_RFC3339_LEN])
{
    out[0] = '\0';
    if (!txo_rows_is_null(rows, i, col))
        txo__text_rfc3339(txo_rows_str(rows, i, col, NULL), out);
}

int txo__saga_times_load(struct txo_db *db, const char *saga_id, struct txo__saga_times *out,
                         struct txo_error *err)
{
    TXO_ASSERT(db != NULL && saga_id != NULL && out != NULL);
    struct txo_rows *rows = NULL;
    struct txo_param p[] = {txo_p_str(saga_id)};
    int rc = txo_db_query(db, SAGA_SQL_TIMELINE, p, 1, &rows, err);
    if (rc < 0) {
        txo_error_wrap(err, "saga %s: reading its times", saga_id);
        return rc;
    }
    size_t n = txo_rows_count(rows);
    if (n == 0) {
        txo_rows_free(rows);
        return txo_error_set(err, TXO_ENOTFOUND, "saga %s not found", saga_id);
    }
    struct txo__saga_times t;
    memset(&t, 0, sizeof(t));
    time_col(rows, 0, COL_CREATED_AT, t.created_at);
    time_col(rows, 0, COL_UPDATED_AT, t.updated_at);
    time_col(rows, 0, COL_DEADLINE_AT, t.deadline_at);
    if (!txo_rows_is_null(rows, 0, COL_STEP_ORDER)) {
        t.steps = txo_calloc(n, sizeof(*t.steps));
        if (t.steps == NULL) {
            txo_rows_free(rows);
            return txo_error_set(err, TXO_ENOMEM, "saga %s: out of memory for its times", saga_id);
        }
        t.n_steps = n;
    }
    for (size_t i = 0; i < t.n_steps; i++) {
        struct txo__saga_step_times *s = &t.steps[i];
        int64_t order = txo_rows_i64(rows, i, COL_STEP_ORDER);
        s->step_order = order > 0 && order <= INT32_MAX ? (unsigned)order : 0;
        time_col(rows, i, COL_STEP_UPDATED_AT, s->updated_at);
        time_col(rows, i, COL_STEP_DEADLINE_AT, s->deadline_at);
        time_col(rows, i, COL_STEP_TRY_DEADLINE, s->try_deadline);
    }
    txo_rows_free(rows);
    *out = t;
    return 0;
}

void txo__saga_times_release(struct txo__saga_times *t)
{
    txo_free(t->steps);
    memset(t, 0, sizeof(*t));
}
