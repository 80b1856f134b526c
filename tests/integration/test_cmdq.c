/*
 * The command queue against a real MariaDB, the claim tests once per claim strategy
 * (skip-locked and update-limit): enqueue in the caller's transaction, claim (lease, token,
 * attempts), complete in the effect's transaction, fencing after a lease expired and another
 * worker claimed the command again, an expired lease nobody took over still completing,
 * transient failures with the backoff stored, FAILED at max_attempts and on a permanent error,
 * poison commands whose lease expires on every attempt, two workers claiming concurrently
 * never getting the same command, stats, the claim statements walking idx_cmdq_due, and the
 * retention purge of DONE commands.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cmdq/cmdq_sql.h"
#include "retention/retention_sql.h"
#include "testdb.h"
#include "txo/cmdq.h"

struct ctx {
    struct testdb t;
    enum txo_claim_strategy claim;
};

static enum txo_claim_strategy skip_locked = TXO_CLAIM_SKIP_LOCKED;
static enum txo_claim_strategy update_limit = TXO_CLAIM_UPDATE_LIMIT;

static int setup(void **state)
{
    enum txo_claim_strategy claim =
        *state != NULL ? *(enum txo_claim_strategy *)*state : TXO_CLAIM_AUTO;
    struct ctx *c =
        testdb_fixture_new(sizeof(*c), claim == TXO_CLAIM_UPDATE_LIMIT ? "cmdq_ul" : "cmdq_sl", 0);
    c->claim = claim;
    testdb_exec(c->t.db, "CREATE TABLE effects (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
                         "command_id BIGINT NOT NULL, worker VARCHAR(16) NOT NULL)");
    *state = c;
    return 0;
}

static int64_t q1(struct txo_db *db, const char *sql, int64_t id)
{
    struct txo_param p = txo_p_i64(id);
    return testdb_i64(db, sql, &p, 1);
}

/* 1 when command id is in status, else 0. */
static int64_t in_status(struct txo_db *db, int64_t id, const char *status)
{
    struct txo_param p[] = {txo_p_i64(id), txo_p_str(status)};
    return testdb_i64(db, "SELECT COUNT(*) FROM command_queue WHERE id = ? AND status = ?", p, 2);
}

static char *s1(struct txo_db *db, const char *sql, int64_t id)
{
    struct txo_param p = txo_p_i64(id);
    return testdb_str(db, sql, &p, 1);
}

/* ---- enqueue ---- */

struct enqueue_args {
    const char *type;
    const char *payload;
    unsigned count;
    bool fail;
    int64_t first_id;
};

static int enqueue_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct enqueue_args *a = arg;
    for (unsigned i = 0; i < a->count; i++) {
        int64_t id = 0;
        int rc = txo_cmdq_enqueue(tx, a->type, a->payload, NULL, &id, err);
        if (rc < 0)
            return rc;
        if (i == 0)
            a->first_id = id;
    }
    return a->fail ? txo_error_set(err, TXO_EBUSINESS, "request failed after the enqueue") : 0;
}

static int64_t enqueue_n(struct txo_db *db, unsigned n)
{
    struct enqueue_args a = {"StartOrderSaga", "{\"order_id\":42}", n, false, 0};
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_transact(db, TXO_ISO_READ_COMMITTED, enqueue_fn, &a, &err) < 0)
        fail_msg("enqueue: %s", err.msg);
    return a.first_id;
}

static struct txo_cmdq_claim_opts claim_opts(const struct ctx *c, const char *owner, size_t max)
{
    struct txo_cmdq_claim_opts o;
    txo_cmdq_claim_opts_init(&o);
    o.owner = owner;
    o.max = max;
    o.lease_s = 30;
    o.claim = c->claim;
    return o;
}

static size_t claim_with(struct txo_db *db, const struct txo_cmdq_claim_opts *o,
                         struct txo_command **cmds)
{
    size_t n = 99;
    struct txo_error err;
    txo_error_init(&err);
    *cmds = NULL;
    if (txo_cmdq_claim_ex(db, o, cmds, &n, &err) < 0)
        fail_msg("claim: %s", err.msg);
    if (n == 0)
        assert_null(*cmds);
    return n;
}

static size_t claim(const struct ctx *c, struct txo_db *db, const char *owner, size_t max,
                    struct txo_command **cmds)
{
    struct txo_cmdq_claim_opts o = claim_opts(c, owner, max);
    return claim_with(db, &o, cmds);
}

/* Makes every PROCESSING lease expired, as if its worker stalled past it. */
static void expire_leases(struct txo_db *db)
{
    testdb_exec(db, "UPDATE command_queue SET locked_until = NOW(6) - INTERVAL 1 SECOND "
                    "WHERE status = 'PROCESSING'");
}

/* Runs the command's effect and completes it in one transaction. */
struct run_args {
    const struct txo_command *cmd;
    const char *worker;
    bool fail_after_complete;
};

static int run_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct run_args *a = arg;
    struct txo_param p[] = {txo_p_i64(a->cmd->id), txo_p_str(a->worker)};
    int rc =
        txo_tx_exec(tx, "INSERT INTO effects (command_id, worker) VALUES (?, ?)", p, 2, NULL, err);
    if (rc < 0)
        return rc;
    rc = txo_cmdq_complete_tx(tx, a->cmd, err);
    if (rc < 0)
        return rc;
    return a->fail_after_complete ? txo_error_set(err, TXO_EBUSINESS, "failed after complete") : 0;
}

static int run(struct txo_db *db, const struct txo_command *cmd, const char *worker,
               bool fail_after_complete, struct txo_error *err)
{
    struct run_args a = {cmd, worker, fail_after_complete};
    txo_error_init(err);
    return txo_db_transact(db, TXO_ISO_READ_COMMITTED, run_fn, &a, err);
}

/* ---- (0) the status names (the moves: tests/unit/test_sql_moves.c) ---- */

static void test_state_machine(void **state)
{
    (void)state;
    const enum txo_cmdq_status all[] = {TXO_CMDQ_PENDING, TXO_CMDQ_PROCESSING, TXO_CMDQ_DONE,
                                        TXO_CMDQ_FAILED};
    /* The moves themselves are checked against the SQL in tests/unit/test_sql_moves.c. */
    for (size_t i = 0; i < 4; i++) {
        enum txo_cmdq_status parsed;
        assert_int_equal(txo_cmdq_status_parse(txo_cmdq_status_name(all[i]), &parsed), 0);
        assert_int_equal(parsed, all[i]);
    }
    enum txo_cmdq_status s;
    assert_int_equal(txo_cmdq_status_parse("done", &s), TXO_EINVAL);
    assert_int_equal(txo_cmdq_status_parse(NULL, &s), TXO_EINVAL);
    assert_string_equal(txo_cmdq_status_name(TXO_CMDQ_DONE), "DONE");
}

/* ---- (1) enqueue, claim, complete ---- */

static void test_enqueue_commits_with_the_caller(void **state)
{
    struct ctx *c = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct enqueue_args bad = {"StartOrderSaga", "{}", 2, true, 0};
    assert_int_equal(txo_db_transact(c->t.db, TXO_ISO_READ_COMMITTED, enqueue_fn, &bad, &err),
                     TXO_EBUSINESS);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue"), 0);

    int64_t id = enqueue_n(c->t.db, 1);
    assert_true(id > 0);
    assert_int_equal(q1(c->t.db,
                        "SELECT COUNT(*) FROM command_queue WHERE id = ? "
                        "AND command_type = 'StartOrderSaga' AND payload = "
                        "'{\"order_id\":42}' AND status = 'PENDING' AND attempts = 0 "
                        "AND next_attempt_at <= NOW(6) AND lock_token IS NULL "
                        "AND locked_by IS NULL AND last_error IS NULL",
                        id),
                     1);

    char type129[130];
    memset(type129, 'x', 129);
    type129[129] = '\0';
    const struct enqueue_args invalid[] = {
        {"", "{}", 1, false, 0},  {NULL, "{}", 1, false, 0}, {type129, "{}", 1, false, 0},
        {"T", NULL, 1, false, 0}, {"T", "", 1, false, 0},    {"T", "{\"a\":", 1, false, 0},
    };
    const int codes[] = {TXO_EINVAL, TXO_EINVAL, TXO_EINVAL,
                         TXO_EINVAL, TXO_EINVAL, TXO_ECONSTRAINT};
    for (size_t i = 0; i < TXO_ARRAY_LEN(invalid); i++) {
        struct enqueue_args a = invalid[i];
        assert_int_equal(txo_db_transact(c->t.db, TXO_ISO_READ_COMMITTED, enqueue_fn, &a, &err),
                         codes[i]);
    }
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue"), 1);
}

static void test_claim_and_complete(void **state)
{
    struct ctx *c = *state;
    struct txo_error err;
    int64_t first = enqueue_n(c->t.db, 3);

    struct txo_command *cmds;
    assert_int_equal(claim(c, c->t.db, "worker-a", 2, &cmds), 2);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(cmds[i].id, first + (int64_t)i); /* due order = enqueue order */
        assert_string_equal(cmds[i].type, "StartOrderSaga");
        assert_string_equal(cmds[i].payload, "{\"order_id\":42}");
        assert_int_equal(cmds[i].attempts, 1);
        assert_int_equal(strlen(cmds[i].token), TXO_CMDQ_TOKEN_LEN);
        struct txo_param p[] = {txo_p_i64(cmds[i].id), txo_p_str(cmds[i].token)};
        assert_int_equal(testdb_i64(c->t.db,
                                    "SELECT COUNT(*) FROM command_queue WHERE id = ? AND "
                                    "lock_token = ? AND status = 'PROCESSING' AND attempts = 1 "
                                    "AND locked_by = 'worker-a' AND locked_until BETWEEN "
                                    "NOW(6) + INTERVAL 25 SECOND AND NOW(6) + INTERVAL 31 SECOND",
                                    p, 2),
                         1);
    }
    assert_string_equal(cmds[0].token, cmds[1].token); /* one token per claim */

    /* A second claim gets the third command, under a new token; then nothing is left. */
    struct txo_command *more;
    assert_int_equal(claim(c, c->t.db, "worker-b", 10, &more), 1);
    assert_int_equal(more[0].id, first + 2);
    assert_string_not_equal(more[0].token, cmds[0].token);
    struct txo_command *none;
    assert_int_equal(claim(c, c->t.db, "worker-b", 10, &none), 0);

    /* The effect and DONE commit together; a rolled-back run leaves the command PROCESSING. */
    assert_int_equal(run(c->t.db, &cmds[0], "a", true, &err), TXO_EBUSINESS);
    assert_int_equal(in_status(c->t.db, cmds[0].id, "PROCESSING"), 1);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM effects"), 0);
    assert_int_equal(run(c->t.db, &cmds[0], "a", false, &err), 0);
    assert_int_equal(q1(c->t.db,
                        "SELECT COUNT(*) FROM command_queue WHERE id = ? AND status = "
                        "'DONE' AND locked_until IS NULL AND locked_by = 'worker-a'",
                        cmds[0].id),
                     1);
    assert_int_equal(q1(c->t.db, "SELECT COUNT(*) FROM effects WHERE command_id = ?", cmds[0].id),
                     1);

    /* Completing it again is a state error, and the effect of that run rolls back. */
    assert_int_equal(run(c->t.db, &cmds[0], "a", false, &err), TXO_ESTATE);
    assert_non_null(strstr(err.msg, "already DONE"));
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM effects"), 1);

    /* The convenience form in its own transaction. */
    txo_error_init(&err);
    assert_int_equal(txo_cmdq_complete(c->t.db, &cmds[1], &err), 0);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue WHERE status = 'DONE'"),
                     2);

    /* Not a claimed command; no such command. */
    struct txo_command fake = {.id = 0};
    assert_int_equal(txo_cmdq_complete(c->t.db, &fake, &err), TXO_EINVAL);
    fake = more[0];
    fake.id = 999999;
    assert_int_equal(txo_cmdq_complete(c->t.db, &fake, &err), TXO_ENOTFOUND);

    txo_commands_free(cmds, 2);
    txo_commands_free(more, 1);
    txo_commands_free(none, 0);
}

static void test_claim_rejects_bad_options(void **state)
{
    struct ctx *c = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct txo_command *cmds = NULL;
    size_t n = 0;
    assert_int_equal(txo_cmdq_claim(c->t.db, NULL, 30, 1, &cmds, &n, &err), TXO_EINVAL);
    assert_int_equal(txo_cmdq_claim(c->t.db, "", 30, 1, &cmds, &n, &err), TXO_EINVAL);
    assert_int_equal(txo_cmdq_claim(c->t.db, "w", 0, 1, &cmds, &n, &err), TXO_EINVAL);
    assert_int_equal(txo_cmdq_claim(c->t.db, "w", 30, 0, &cmds, &n, &err), TXO_EINVAL);
    assert_int_equal(txo_cmdq_claim(c->t.db, "w", 30, TXO_CMDQ_CLAIM_MAX + 1, &cmds, &n, &err),
                     TXO_EINVAL);
    char owner[TXO_CMDQ_OWNER_MAX + 2];
    memset(owner, 'o', sizeof(owner) - 1);
    owner[sizeof(owner) - 1] = '\0';
    assert_int_equal(txo_cmdq_claim(c->t.db, owner, 30, 1, &cmds, &n, &err), TXO_EINVAL);
    assert_null(cmds);
    /* The simple form: AUTO strategy, works on this server. */
    enqueue_n(c->t.db, 1);
    assert_int_equal(txo_cmdq_claim(c->t.db, "w", 30, 5, &cmds, &n, &err), 0);
    assert_int_equal(n, 1);
    txo_commands_free(cmds, n);
}

/* ---- (2) fencing ---- */

static void test_stale_token_is_fenced_after_reclaim(void **state)
{
    struct ctx *c = *state;
    struct txo_error err;
    int64_t id = enqueue_n(c->t.db, 1);
    struct txo_db *db_b = testdb_connect(&c->t);

    struct txo_command *a, *b;
    assert_int_equal(claim(c, c->t.db, "worker-a", 1, &a), 1);
    /* Not expired yet: nobody else can take it. */
    assert_int_equal(claim(c, db_b, "worker-b", 1, &b), 0);

    /* A stalls past its lease; B claims the command again. */
    expire_leases(c->t.db);
    assert_int_equal(claim(c, db_b, "worker-b", 1, &b), 1);
    assert_int_equal(b[0].id, id);
    assert_int_equal(b[0].attempts, 2);
    assert_string_not_equal(b[0].token, a[0].token);
    assert_string_equal(b[0].payload, "{\"order_id\":42}");

    /* A wakes up: it can neither complete (its effect rolls back) nor fail the command. */
    assert_int_equal(run(c->t.db, &a[0], "a", false, &err), TXO_ELEASELOST);
    assert_non_null(strstr(err.msg, "lease lost"));
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM effects"), 0);
    txo_error_init(&err);
    assert_int_equal(txo_cmdq_fail(c->t.db, &a[0], "boom", false, 5, NULL, NULL, &err),
                     TXO_ELEASELOST);
    assert_int_equal(txo_cmdq_fail(c->t.db, &a[0], "boom", true, 5, NULL, NULL, &err),
                     TXO_ELEASELOST);
    struct txo_param p[] = {txo_p_i64(id), txo_p_str(b[0].token)};
    assert_int_equal(testdb_i64(c->t.db,
                                "SELECT COUNT(*) FROM command_queue WHERE id = ? AND lock_token "
                                "= ? AND status = 'PROCESSING' AND locked_by = 'worker-b' AND "
                                "attempts = 2 AND last_error IS NULL",
                                p, 2),
                     1);

    /* B finishes it; A is still fenced (now the row is DONE under B's token). */
    assert_int_equal(run(db_b, &b[0], "b", false, &err), 0);
    assert_int_equal(run(c->t.db, &a[0], "a", false, &err), TXO_ELEASELOST);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM effects"), 1);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM effects WHERE worker = 'b'"), 1);
    assert_int_equal(in_status(c->t.db, id, "DONE"), 1);

    /* A stale token after a transient failure (back to PENDING, token cleared) is fenced too. */
    int64_t id2 = enqueue_n(c->t.db, 1);
    struct txo_command *x;
    assert_int_equal(claim(c, c->t.db, "worker-a", 1, &x), 1);
    assert_int_equal(x[0].id, id2);
    txo_error_init(&err);
    assert_int_equal(txo_cmdq_fail(c->t.db, &x[0], "transient", false, 5, NULL, NULL, &err), 0);
    assert_int_equal(txo_cmdq_complete(c->t.db, &x[0], &err), TXO_ELEASELOST);
    assert_int_equal(in_status(c->t.db, id2, "PENDING"), 1);

    txo_commands_free(a, 1);
    txo_commands_free(b, 1);
    txo_commands_free(x, 1);
    txo_db_close(db_b);
}

static void test_expired_lease_nobody_took_still_completes(void **state)
{
    struct ctx *c = *state;
    struct txo_error err;
    enqueue_n(c->t.db, 1);
    struct txo_command *a;
    assert_int_equal(claim(c, c->t.db, "worker-a", 1, &a), 1);
    expire_leases(c->t.db);
    assert_int_equal(run(c->t.db, &a[0], "a", false, &err), 0);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue WHERE status = 'DONE'"),
                     1);
    /* And it is not claimed again. */
    struct txo_command *b;
    assert_int_equal(claim(c, c->t.db, "worker-b", 1, &b), 0);
    txo_commands_free(a, 1);
}

/* ---- (3) failures: backoff, FAILED ---- */

/* Milliseconds until the next attempt of command id. */
static int64_t delay_ms(struct txo_db *db, int64_t id)
{
    return q1(db,
              "SELECT ROUND(TIMESTAMPDIFF(MICROSECOND, NOW(6), next_attempt_at) / 1000) "
              "FROM command_queue WHERE id = ?",
              id);
}

static void assert_delay_near(struct txo_db *db, int64_t id, int64_t want_ms)
{
    int64_t d = delay_ms(db, id);
    if (d > want_ms || d < want_ms - 2000)
        fail_msg("command %lld is due in %lld ms, want about %lld", (long long)id, (long long)d,
                 (long long)want_ms);
}

static void test_transient_failures_back_off_then_fail(void **state)
{
    struct ctx *c = *state;
    struct txo_error err;
    txo_error_init(&err);
    int64_t id = enqueue_n(c->t.db, 1);
    const struct txo_backoff b = {60000, 200000, 0.0}; /* exact: 60 s, 120 s, then the cap */
    const unsigned max_attempts = 4;
    const int64_t want[] = {60000, 120000, 200000};

    for (unsigned attempt = 1; attempt <= 3; attempt++) {
        struct txo_command *cmds;
        assert_int_equal(claim(c, c->t.db, "w", 1, &cmds), 1);
        assert_int_equal(cmds[0].attempts, attempt);
        char msg[64];
        snprintf(msg, sizeof(msg), "TXO_EUNAVAILABLE: payments down (%u)", attempt);
        bool failed = true;
        assert_int_equal(
            txo_cmdq_fail(c->t.db, &cmds[0], msg, false, max_attempts, &b, &failed, &err), 0);
        assert_false(failed);
        struct txo_param p[] = {txo_p_i64(id), txo_p_str(msg), txo_p_i64(attempt)};
        assert_int_equal(testdb_i64(c->t.db,
                                    "SELECT COUNT(*) FROM command_queue WHERE id = ? AND status = "
                                    "'PENDING' AND last_error = ? AND attempts = ? AND "
                                    "lock_token IS NULL AND locked_by IS NULL AND locked_until IS "
                                    "NULL",
                                    p, 3),
                         1);
        assert_delay_near(c->t.db, id, want[attempt - 1]);
        /* Not due yet: no hot loop. */
        struct txo_command *none;
        assert_int_equal(claim(c, c->t.db, "w", 1, &none), 0);
        testdb_exec(c->t.db, "UPDATE command_queue SET next_attempt_at = NOW(6)");
        txo_commands_free(cmds, 1);
    }

    /* The 4th attempt fails too: attempts reached max_attempts, FAILED for good. */
    struct txo_command *cmds;
    assert_int_equal(claim(c, c->t.db, "w", 1, &cmds), 1);
    assert_int_equal(cmds[0].attempts, 4);
    bool failed = false;
    assert_int_equal(
        txo_cmdq_fail(c->t.db, &cmds[0], "still down", false, max_attempts, &b, &failed, &err), 0);
    assert_true(failed);
    assert_int_equal(q1(c->t.db,
                        "SELECT COUNT(*) FROM command_queue WHERE id = ? AND status = "
                        "'FAILED' AND last_error = 'still down' AND attempts = 4 AND "
                        "locked_until IS NULL",
                        id),
                     1);
    struct txo_command *none;
    testdb_exec(c->t.db, "UPDATE command_queue SET next_attempt_at = NOW(6) - INTERVAL 1 DAY");
    assert_int_equal(claim(c, c->t.db, "w", 1, &none), 0);
    /* Failing it again with the same claim: a state error. */
    assert_int_equal(txo_cmdq_fail(c->t.db, &cmds[0], "again", true, max_attempts, &b, NULL, &err),
                     TXO_ESTATE);
    txo_commands_free(cmds, 1);

    /* With jitter 0.5 the first delay lands in [0.5, 1.5) x 60 s. */
    int64_t id2 = enqueue_n(c->t.db, 1);
    const struct txo_backoff jb = {60000, 200000, 0.5};
    assert_int_equal(claim(c, c->t.db, "w", 1, &cmds), 1);
    assert_int_equal(txo_cmdq_fail(c->t.db, &cmds[0], NULL, false, 3, &jb, NULL, &err), 0);
    int64_t d = delay_ms(c->t.db, id2);
    if (d < 28000 || d > 90000)
        fail_msg("jittered delay %lld ms, want 30000..90000", (long long)d);
    assert_int_equal(q1(c->t.db, "SELECT last_error IS NULL FROM command_queue WHERE id = ?", id2),
                     1);
    txo_commands_free(cmds, 1);
}

static void test_permanent_failure_and_long_errors(void **state)
{
    struct ctx *c = *state;
    struct txo_error err;
    txo_error_init(&err);
    int64_t id = enqueue_n(c->t.db, 1);
    struct txo_command *cmds;
    assert_int_equal(claim(c, c->t.db, "w", 1, &cmds), 1);
    /* 1999 ASCII bytes then a 2-byte character: cut before the character, not inside it. */
    char msg[2100];
    memset(msg, 'e', 1999);
    memcpy(msg + 1999, "\xc3\xa9tail", 7);
    bool failed = false;
    assert_int_equal(txo_cmdq_fail(c->t.db, &cmds[0], msg, true, 10, NULL, &failed, &err), 0);
    assert_true(failed);
    assert_int_equal(q1(c->t.db,
                        "SELECT LENGTH(last_error) FROM command_queue WHERE id = ? "
                        "AND status = 'FAILED' AND attempts = 1",
                        id),
                     1999);

    /* Bad arguments change nothing. */
    int64_t id2 = enqueue_n(c->t.db, 1);
    struct txo_command *c2;
    assert_int_equal(claim(c, c->t.db, "w", 1, &c2), 1);
    assert_int_equal(txo_cmdq_fail(c->t.db, &c2[0], "x", false, 0, NULL, NULL, &err), TXO_EINVAL);
    const struct txo_backoff bad = {100, 10, 0.5};
    assert_int_equal(txo_cmdq_fail(c->t.db, &c2[0], "x", false, 3, &bad, NULL, &err), TXO_EINVAL);
    assert_int_equal(in_status(c->t.db, id2, "PROCESSING"), 1);
    /* The default backoff: about 1 s (jitter 0.5). */
    assert_int_equal(txo_cmdq_fail(c->t.db, &c2[0], "x", false, 3, NULL, NULL, &err), 0);
    int64_t d = delay_ms(c->t.db, id2);
    if (d < 300 || d > 1500)
        fail_msg("default backoff delay %lld ms, want 500..1500", (long long)d);
    txo_commands_free(cmds, 1);
    txo_commands_free(c2, 1);
}

static void test_poison_command_fails_after_max_expired_leases(void **state)
{
    struct ctx *c = *state;
    int64_t id = enqueue_n(c->t.db, 1);
    int64_t healthy = enqueue_n(c->t.db, 1);
    struct txo_cmdq_claim_opts o = claim_opts(c, "crashy", 1);
    o.max_attempts = 2;

    struct txo_command *cmds;
    assert_int_equal(claim_with(c->t.db, &o, &cmds), 1);
    assert_int_equal(cmds[0].id, id);
    txo_commands_free(cmds, 1);
    expire_leases(c->t.db); /* the worker died */
    assert_int_equal(claim_with(c->t.db, &o, &cmds), 1);
    assert_int_equal(cmds[0].id, id);
    assert_int_equal(cmds[0].attempts, 2);
    txo_commands_free(cmds, 1);
    expire_leases(c->t.db); /* and died again: the command is poison */

    o.max = 5;
    assert_int_equal(claim_with(c->t.db, &o, &cmds), 1);
    assert_int_equal(cmds[0].id, healthy);
    txo_commands_free(cmds, 1);
    char *last_error = s1(c->t.db,
                          "SELECT last_error FROM command_queue WHERE id = ? AND status = "
                          "'FAILED' AND attempts = 2 AND locked_until IS NULL",
                          id);
    assert_non_null(last_error);
    assert_string_equal(last_error, "TXO_ELEASELOST: lease of crashy expired on attempt 2 of 2");
    txo_free(last_error);

    /* Without a limit an expired lease is always claimed again. */
    expire_leases(c->t.db);
    o.max_attempts = 0;
    assert_int_equal(claim_with(c->t.db, &o, &cmds), 1);
    assert_int_equal(cmds[0].id, healthy);
    assert_int_equal(cmds[0].attempts, 2);
    txo_commands_free(cmds, 1);
}

/* ---- (4) two workers at once ---- */

struct worker {
    struct ctx *c;
    struct txo_db *db;
    const char *name;
    int64_t *ids;
    size_t n, cap;
    unsigned bad_attempts;
    int rc;
    char msg[TXO_ERROR_MSG_MAX];
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct txo_error err;
    txo_error_init(&err);
    struct txo_cmdq_claim_opts o = claim_opts(w->c, w->name, 7);
    unsigned empty = 0;
    while (empty < 3) {
        struct txo_command *cmds = NULL;
        size_t n = 0;
        w->rc = txo_cmdq_claim_ex(w->db, &o, &cmds, &n, &err);
        if (w->rc < 0)
            break;
        if (n == 0) {
            empty++;
            txo_sleep_ms(5);
            continue;
        }
        empty = 0;
        for (size_t i = 0; i < n && w->rc == 0; i++) {
            if (cmds[i].attempts != 1)
                w->bad_attempts++;
            w->rc = run(w->db, &cmds[i], w->name, false, &err);
            if (w->n < w->cap)
                w->ids[w->n++] = cmds[i].id;
        }
        txo_commands_free(cmds, n);
        if (w->rc < 0)
            break;
    }
    snprintf(w->msg, sizeof(w->msg), "%s", err.msg);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void test_two_workers_never_share_a_command(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 600;
    int64_t first = enqueue_n(c->t.db, n);
    struct worker w[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].c = c;
        w[i].db = testdb_connect(&c->t);
        w[i].name = i == 0 ? "worker-a" : "worker-b";
        w[i].cap = n;
        w[i].ids = txo_calloc(n, sizeof(int64_t));
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        if (w[i].rc != 0)
            fail_msg("%s: %s", w[i].name, w[i].msg);
        assert_int_equal(w[i].bad_attempts, 0);
        print_message("%s (%s) ran %zu\n", w[i].name, txo_claim_strategy_name(c->claim), w[i].n);
    }
    /* Every command ran exactly once, by one worker. */
    assert_int_equal(w[0].n + w[1].n, n);
    int64_t *all = txo_calloc(n, sizeof(*all));
    memcpy(all, w[0].ids, w[0].n * sizeof(*all));
    memcpy(all + w[0].n, w[1].ids, w[1].n * sizeof(*all));
    qsort(all, n, sizeof(*all), cmp_i64);
    for (size_t i = 0; i < n; i++) {
        if (all[i] != first + (int64_t)i)
            fail_msg("ran ids: position %zu holds %lld (duplicate or missing)", i,
                     (long long)all[i]);
    }
    txo_free(all);
    assert_int_equal(testdb_q(c->t.db,
                              "SELECT COUNT(*) FROM command_queue WHERE status = 'DONE' AND "
                              "attempts = 1"),
                     n);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM effects"), n);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(DISTINCT command_id) FROM effects"), n);
    for (int i = 0; i < 2; i++) {
        txo_free(w[i].ids);
        txo_db_close(w[i].db);
    }
}

/* ---- (5) stats, indexes, retention ---- */

static void test_stats(void **state)
{
    struct ctx *c = *state;
    struct txo_error err;
    txo_error_init(&err);
    uint64_t pending = 9, processing = 9, failed = 9;
    assert_int_equal(txo_cmdq_stats(c->t.db, &pending, &processing, &failed, &err), 0);
    assert_int_equal(pending + processing + failed, 0);

    enqueue_n(c->t.db, 5);
    struct txo_command *cmds;
    assert_int_equal(claim(c, c->t.db, "w", 3, &cmds), 3);
    assert_int_equal(txo_cmdq_complete(c->t.db, &cmds[0], &err), 0);
    assert_int_equal(txo_cmdq_fail(c->t.db, &cmds[1], "bad", true, 3, NULL, NULL, &err), 0);
    assert_int_equal(txo_cmdq_stats(c->t.db, &pending, &processing, &failed, &err), 0);
    assert_int_equal(pending, 2);
    assert_int_equal(processing, 1);
    assert_int_equal(failed, 1);
    assert_int_equal(txo_cmdq_stats(c->t.db, NULL, NULL, NULL, &err), 0);
    txo_commands_free(cmds, 3);
}

static void test_statements_walk_the_due_index(void **state)
{
    struct ctx *c = *state;
    testdb_exec(c->t.db, "INSERT INTO command_queue (command_type, payload, status) "
                         "SELECT 'T', '{}', 'DONE' FROM seq_1_to_5000");
    enqueue_n(c->t.db, 20);
    testdb_exec(c->t.db, "ANALYZE TABLE command_queue");
    struct txo_param limit = txo_p_i64(10);
    testdb_assert_explain(c->t.db, "EXPLAIN " CMDQ_SQL_CLAIM_EXPIRED_SKIP_LOCKED, &limit, 1,
                          "idx_cmdq_due");
    testdb_assert_explain(c->t.db, "EXPLAIN " CMDQ_SQL_CLAIM_DUE_SKIP_LOCKED, &limit, 1,
                          "idx_cmdq_due");
    struct txo_param ul[] = {txo_p_str("w"), txo_p_str("t"), txo_p_i64(30), txo_p_i64(10)};
    testdb_assert_explain(c->t.db, "EXPLAIN " CMDQ_SQL_CLAIM_UPDATE_LIMIT, ul, 4, "idx_cmdq_due");
    testdb_assert_explain(c->t.db, "EXPLAIN " CMDQ_SQL_RECLAIM_UPDATE_LIMIT, ul, 4, "idx_cmdq_due");
    testdb_assert_explain(c->t.db, "EXPLAIN " CMDQ_SQL_ANY_EXPIRED, NULL, 0, "idx_cmdq_due");
    struct txo_param tok = txo_p_str("t");
    testdb_assert_explain(c->t.db, "EXPLAIN " CMDQ_SQL_CLAIM_SELECT_BY_TOKEN, &tok, 1,
                          "idx_cmdq_due");
    const char *cutoff = "2100-01-01 00:00:00.000000";
    struct txo_param purge[] = {txo_p_str(cutoff), txo_p_str(cutoff), txo_p_i64(500)};
    testdb_assert_explain(c->t.db, "EXPLAIN " RETENTION_SQL_CMDQ_FIRST, purge, 3, "idx_cmdq_due");
    struct txo_param after[] = {txo_p_str(cutoff),
                                txo_p_str(cutoff),
                                txo_p_str("2000-01-01 00:00:00"),
                                txo_p_str("2000-01-01 00:00:00"),
                                txo_p_i64(1),
                                txo_p_i64(500)};
    testdb_assert_explain(c->t.db, "EXPLAIN " RETENTION_SQL_CMDQ_AFTER, after, 6, "idx_cmdq_due");
}

static void test_purge_done(void **state)
{
    struct ctx *c = *state;
    struct txo_error err;
    txo_error_init(&err);
    /* 9 DONE 3 days ago, 2 DONE an hour ago, 2 FAILED and 1 PENDING 3 days old. */
    testdb_exec(c->t.db, "INSERT INTO command_queue (command_type, payload, status, "
                         "next_attempt_at, updated_at) SELECT 'T', JSON_OBJECT('n', seq), 'DONE', "
                         "NOW(6) - INTERVAL 3 DAY, NOW(6) - INTERVAL 3 DAY + INTERVAL seq SECOND "
                         "FROM seq_1_to_9");
    testdb_exec(c->t.db, "INSERT INTO command_queue (command_type, payload, status, "
                         "next_attempt_at, updated_at) SELECT 'T', '{}', 'DONE', "
                         "NOW(6) - INTERVAL 2 HOUR, NOW(6) - INTERVAL 1 HOUR FROM seq_1_to_2");
    testdb_exec(c->t.db, "INSERT INTO command_queue (command_type, payload, status, "
                         "next_attempt_at, updated_at) SELECT 'T', '{}', 'FAILED', "
                         "NOW(6) - INTERVAL 3 DAY, NOW(6) - INTERVAL 3 DAY FROM seq_1_to_2");
    testdb_exec(c->t.db, "INSERT INTO command_queue (command_type, payload, status, "
                         "next_attempt_at, updated_at) VALUES ('T', '{}', 'PENDING', "
                         "NOW(6) - INTERVAL 3 DAY, NOW(6) - INTERVAL 3 DAY)");
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue"), 14);

    uint64_t deleted = 0;
    assert_int_equal(txo_cmdq_purge_done(c->t.db, 86400, 4, 1, &deleted, &err), 0);
    assert_int_equal(deleted, 4);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue"), 10);
    assert_int_equal(txo_cmdq_purge_done(c->t.db, 86400, 4, 0, &deleted, &err), 0);
    assert_int_equal(deleted, 5);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue WHERE status = 'DONE'"),
                     2);
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue WHERE status = 'FAILED'"), 2);
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue WHERE status = 'PENDING'"), 1);
    assert_int_equal(txo_cmdq_purge_done(c->t.db, 86400, 4, 0, &deleted, &err), 0);
    assert_int_equal(deleted, 0);
    assert_int_equal(txo_cmdq_purge_done(c->t.db, 86400, 0, 0, &deleted, &err), TXO_EINVAL);

    /* A command done through the API just now is kept at age 60 s (the two done an hour ago
     * go), and purged at age 0. */
    enqueue_n(c->t.db, 1);
    struct txo_command *cmds;
    assert_int_equal(claim(c, c->t.db, "w", 1, &cmds), 1);
    assert_int_equal(txo_cmdq_complete(c->t.db, &cmds[0], &err), 0);
    txo_commands_free(cmds, 1);
    assert_int_equal(txo_cmdq_purge_done(c->t.db, 60, 100, 0, &deleted, &err), 0);
    assert_int_equal(deleted, 2);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue WHERE status = 'DONE'"),
                     1);
    txo_sleep_ms(2);
    assert_int_equal(txo_cmdq_purge_done(c->t.db, 0, 100, 0, &deleted, &err), 0);
    assert_int_equal(deleted, 1);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue"), 3);
}

#define BOTH(fn)                                                                                   \
    cmocka_unit_test_prestate_setup_teardown(fn, setup, testdb_free_state, &skip_locked),          \
        cmocka_unit_test_prestate_setup_teardown(fn, setup, testdb_free_state, &update_limit)
#define ONCE(fn) cmocka_unit_test_prestate_setup_teardown(fn, setup, testdb_free_state, NULL)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_machine),
        ONCE(test_enqueue_commits_with_the_caller),
        BOTH(test_claim_and_complete),
        ONCE(test_claim_rejects_bad_options),
        BOTH(test_stale_token_is_fenced_after_reclaim),
        BOTH(test_expired_lease_nobody_took_still_completes),
        BOTH(test_transient_failures_back_off_then_fail),
        ONCE(test_permanent_failure_and_long_errors),
        BOTH(test_poison_command_fails_after_max_expired_leases),
        BOTH(test_two_workers_never_share_a_command),
        ONCE(test_stats),
        ONCE(test_statements_walk_the_due_index),
        ONCE(test_purge_done),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
