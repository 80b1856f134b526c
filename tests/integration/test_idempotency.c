/*
 * Idempotency keys (include/txo/idempotency.h) against a real MariaDB: the request hash and
 * key rules, the NEW -> COMPLETED -> REPLAY life of a key row inside the caller's transaction,
 * CONFLICT on another body, no trace after a rollback, a second connection that sees
 * IN_PROGRESS while the first transaction is open and REPLAY once it committed, take-over of
 * an abandoned PROCESSING row, the errors of txo_idem_complete, the batch lookup and the batch
 * store of COMPLETED keys (and its 1062 on a key another transaction inserted), and batched
 * retention.
 *
 * Each test gets a fresh migrated database (tests/support/testdb.h). Rows are inspected with
 * plain SQL, never through the module under test.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testrun.h"
#include "testdb.h"
#include "testsql.h"

/* Skips a test that shows a bug reported to the module's owner, unless asked to run it. */
static void hash_of(const char *method, const char *path, const char *body,
                    char out[TXO_IDEM_HASH_LEN])
{
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_idem_hash(method, path, body, strlen(body), out, &err);
    if (rc != 0)
        fail_msg("txo_idem_hash(%s): %s", body, err.msg);
}

/* ---- what one transaction does with a key ---- */

struct idem_call {
    const char *key;
    const char *hash;
    unsigned stale_s;
    /* After NEW: complete with these (complete_body NULL = do not complete). */
    int complete_status;
    const char *complete_body;
    int fail_with; /* != 0: roll back with this code after begin (and complete) */
    /* Results. */
    int begin_rc;
    int complete_rc;
    struct txo_idem_claim claim;
    struct txo_error begin_err;
};

static int idem_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct idem_call *c = arg;
    txo_idem_claim_release(&c->claim); /* from an earlier attempt */
    c->complete_rc = 1;                /* "not called" */
    txo_error_init(&c->begin_err);
    c->begin_rc = txo_idem_begin(tx, c->key, c->hash, c->stale_s, &c->claim, &c->begin_err);
    if (c->begin_rc != 0) {
        *err = c->begin_err;
        return c->begin_rc;
    }
    if (c->claim.outcome == TXO_IDEM_NEW && c->complete_body != NULL) {
        c->complete_rc = txo_idem_complete(tx, c->key, c->complete_status, c->complete_body, err);
        if (c->complete_rc != 0)
            return c->complete_rc;
    }
    if (c->fail_with != 0)
        return txo_error_set(err, c->fail_with, "the effect failed");
    return 0;
}

static int run_call(struct txo_db *db, struct idem_call *c)
{
    struct txo_error err;
    txo_error_init(&err);
    txo_idem_claim_init(&c->claim);
    return txo_db_transact(db, TXO_ISO_READ_COMMITTED, idem_fn, c, &err);
}

static int64_t key_rows(struct txo_db *db)
{
    return testdb_i64(db, "SELECT COUNT(*) FROM idempotency_keys", NULL, 0);
}

/* status|response_status|request_hash|updated_at of key, or NULL when there is no row. */
static char *row_of(struct txo_db *db, const char *key)
{
    struct txo_param p = txo_p_str(key);
    return testdb_str(db,
                      "SELECT CONCAT_WS('|', status, IFNULL(response_status, 'null'),"
                      " request_hash, DATE_FORMAT(updated_at, '%Y-%m-%d %H:%i:%s.%f'))"
                      " FROM idempotency_keys WHERE idempotency_key = ?",
                      &p, 1);
}

/* ---- hash and key rules (no SQL) ---- */

static void test_hash_is_canonical(void **state)
{
    (void)state;
    char a[TXO_IDEM_HASH_LEN], b[TXO_IDEM_HASH_LEN], c[TXO_IDEM_HASH_LEN];

    /* The documented input: "<method> <path>\n" + canonical JSON, SHA-256 in lower-case hex
     * (the expected value comes from sha256sum over that exact text). */
    hash_of("POST", "/orders", "{ \"b\": [true, null, \"x\"],\n\t\"a\": 1 }", a);
    assert_string_equal(a, "fca78d1cbb549bcbfaa84d54080797ff1519fa92b8ae61565147fb56a66e21e1");
    assert_int_equal(strlen(a), 64);
    for (size_t i = 0; i < 64; i++)
        assert_true((a[i] >= '0' && a[i] <= '9') || (a[i] >= 'a' && a[i] <= 'f'));

    /* Key order (also nested) and whitespace do not matter; string escapes do not either. */
    hash_of(
        "POST", "/orders",
        "{\"customer\":{\"id\":7,\"name\":\"J\\u00fcrgen\"},\"items\":[{\"sku\":\"A\",\"qty\":2}],"
        "\"total\":9007199254740993}",
        a);
    hash_of(
        "POST", "/orders",
        "\r\n{ \"total\" : 9007199254740993 ,\n  \"items\" : [ { \"qty\" : 2 , \"sku\" : \"A\" } ],"
        " \"customer\" : { \"name\" : \"Jürgen\" , \"id\" : 7 } }  \n",
        b);
    assert_string_equal(a, b);

    /* A changed value, even by one in the 54th bit, is another request. */
    hash_of("POST", "/orders",
            "{\"customer\":{\"id\":7,\"name\":\"Jürgen\"},\"items\":[{\"sku\":\"A\",\"qty\":2}],"
            "\"total\":9007199254740992}",
            c);
    assert_string_not_equal(a, c);
    /* Array order does matter. */
    hash_of("POST", "/x", "[1,2]", b);
    hash_of("POST", "/x", "[2,1]", c);
    assert_string_not_equal(b, c);

    /* Method and path are part of the request. */
    hash_of("POST", "/orders", "{\"a\":1}", a);
    hash_of("PUT", "/orders", "{\"a\":1}", b);
    hash_of("POST", "/orders/1", "{\"a\":1}", c);
    assert_string_not_equal(a, b);
    assert_string_not_equal(a, c);
    assert_string_not_equal(b, c);

    /* Only len bytes are read. */
    struct txo_error err;
    txo_error_init(&err);
    const char *longer = "{\"a\":1}garbage";
    assert_int_equal(txo_idem_hash("POST", "/orders", longer, 7, b, &err), 0);
    assert_string_equal(a, b);
}

static void test_hash_rejects_malformed_json(void **state)
{
    (void)state;
    const char *bad[] = {
        "{\"a\":", "{\"a\":1} {\"b\":2}", "", "{'a':1}", "{\"a\":1,\"a\":2}", "[1,]", "nul"};
    char out[TXO_IDEM_HASH_LEN];
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        memset(out, 'Z', sizeof(out));
        struct txo_error err;
        txo_error_init(&err);
        int rc = txo_idem_hash("POST", "/orders", bad[i], strlen(bad[i]), out, &err);
        if (rc != TXO_EINVAL)
            fail_msg("body %s: rc %d, expected TXO_EINVAL", bad[i], rc);
        assert_int_equal(err.code, TXO_EINVAL);
        assert_non_null(strstr(err.msg, "line"));
        assert_int_equal(out[0], 'Z'); /* nothing written on failure */
    }
    /* A scalar is one JSON value too. */
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_idem_hash("DELETE", "/orders/1", "null", 4, out, &err), 0);
}

static void test_key_check(void **state)
{
    (void)state;
    struct txo_error err;
    char key[300];

    memset(key, 'k', 255);
    key[255] = '\0';
    txo_error_init(&err);
    assert_int_equal(txo_idem_key_check(key, &err), 0);
    /* Every printable byte is allowed. */
    for (int ch = 0x21; ch <= 0x7e; ch++)
        key[ch - 0x21] = (char)ch;
    key[0x7e - 0x21 + 1] = '\0';
    assert_int_equal(txo_idem_key_check(key, &err), 0);
    assert_int_equal(txo_idem_key_check("a", &err), 0);
    assert_int_equal(txo_idem_key_check("order-7f3c2a1e-9b4d-4e2a-8f61-2d9c0b7a5e13", &err), 0);

    memset(key, 'k', 256);
    key[256] = '\0';
    txo_error_init(&err);
    assert_int_equal(txo_idem_key_check(key, &err), TXO_EINVAL);
    assert_non_null(strstr(err.msg, "256"));

    const char *bad[] = {"",        "with space", "tab\there",   "nl\n",
                         "del\x7f", "bell\x07",   "caf\xc3\xa9", "\xff"};
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        txo_error_init(&err);
        if (txo_idem_key_check(bad[i], &err) != TXO_EINVAL)
            fail_msg("key #%zu accepted", i);
        assert_int_equal(err.code, TXO_EINVAL);
        assert_true(err.msg[0] != '\0');
    }
    txo_error_init(&err);
    assert_int_equal(txo_idem_key_check(NULL, &err), TXO_EINVAL);
}

/* ---- the key's life in the database ---- */

static void test_new_complete_replay_conflict(void **state)
{
    struct testdb *t = *state;
    char hash[TXO_IDEM_HASH_LEN], other[TXO_IDEM_HASH_LEN];
    hash_of("POST", "/orders", "{\"sku\":\"A\",\"qty\":1}", hash);
    hash_of("POST", "/orders", "{\"sku\":\"A\",\"qty\":2}", other);
    /* Stored byte for byte: spacing, Unicode and a big integer. */
    const char *response = "{\"order_id\": 42, \"status\": \"NEW\", \"note\": \"Jürgen ☃\","
                           " \"big\": 9007199254740993}";

    struct idem_call c = {.key = "key-1",
                          .hash = hash,
                          .stale_s = 3600,
                          .complete_status = 201,
                          .complete_body = response};
    assert_int_equal(run_call(t->db, &c), 0);
    assert_int_equal(c.claim.outcome, TXO_IDEM_NEW);
    assert_false(c.claim.taken_over);
    assert_null(c.claim.response);
    assert_int_equal(c.complete_rc, 0);
    txo_idem_claim_release(&c.claim);

    assert_int_equal(key_rows(t->db), 1);
    struct txo_param p = txo_p_str("key-1");
    char *body = testdb_str(t->db,
                            "SELECT response_body FROM idempotency_keys"
                            " WHERE idempotency_key = ?",
                            &p, 1);
    assert_string_equal(body, response);
    txo_free(body);
    char *row = row_of(t->db, "key-1");
    assert_non_null(row);
    char expect_prefix[128];
    snprintf(expect_prefix, sizeof(expect_prefix), "COMPLETED|201|%s|", hash);
    assert_memory_equal(row, expect_prefix, strlen(expect_prefix));

    /* Same request again: the stored response, nothing written. */
    struct idem_call r = {.key = "key-1",
                          .hash = hash,
                          .stale_s = 3600,
                          .complete_status = 500,
                          .complete_body = "{\"must\":\"not run\"}"};
    assert_int_equal(run_call(t->db, &r), 0);
    assert_int_equal(r.claim.outcome, TXO_IDEM_REPLAY);
    assert_int_equal(r.claim.status, 201);
    assert_string_equal(r.claim.response, response);
    assert_false(r.claim.taken_over);
    assert_int_equal(r.complete_rc, 1); /* the fn did not complete: not NEW */
    txo_idem_claim_release(&r.claim);
    assert_null(r.claim.response); /* release resets the claim */

    /* Another body with the same key. */
    struct idem_call x = {.key = "key-1", .hash = other, .stale_s = 3600};
    assert_int_equal(run_call(t->db, &x), 0);
    assert_int_equal(x.claim.outcome, TXO_IDEM_CONFLICT);
    assert_null(x.claim.response);
    txo_idem_claim_release(&x.claim);

    /* Neither touched the row (not even updated_at). */
    assert_int_equal(key_rows(t->db), 1);
    char *after = row_of(t->db, "key-1");
    assert_string_equal(after, row);
    txo_free(after);
    txo_free(row);

    /* Another key is independent. */
    struct idem_call k2 = {.key = "key-2",
                           .hash = other,
                           .stale_s = 3600,
                           .complete_status = 202,
                           .complete_body = "[]"};
    assert_int_equal(run_call(t->db, &k2), 0);
    assert_int_equal(k2.claim.outcome, TXO_IDEM_NEW);
    txo_idem_claim_release(&k2.claim);
    assert_int_equal(key_rows(t->db), 2);

    /* A bad key fails before any SQL. */
    struct idem_call bad = {.key = "bad key", .hash = hash, .stale_s = 3600};
    assert_int_equal(run_call(t->db, &bad), TXO_EINVAL);
    assert_int_equal(bad.begin_rc, TXO_EINVAL);
    assert_int_equal(key_rows(t->db), 2);
}

/* A COMPLETED row as written before migration 0007: response {"id":1}, no response_status. */
static void insert_legacy(struct txo_db *db, const char *key, const char *hash)
{
    struct txo_param p[] = {txo_p_str(key), txo_p_str(hash)};
    testsql_exec(db,
                 "INSERT INTO idempotency_keys (idempotency_key, request_hash, status, "
                 "response_body) VALUES (?, ?, 'COMPLETED', '{\"id\":1}')",
                 p, 2);
}

static void test_replay_of_row_without_status(void **state)
{
    struct testdb *t = *state;
    char hash[TXO_IDEM_HASH_LEN];
    hash_of("POST", "/orders", "{}", hash);
    /* A row written before migration 0007 has no response_status: replayed as 200. */
    insert_legacy(t->db, "legacy", hash);
    struct idem_call r = {.key = "legacy", .hash = hash, .stale_s = 3600};
    assert_int_equal(run_call(t->db, &r), 0);
    assert_int_equal(r.claim.outcome, TXO_IDEM_REPLAY);
    assert_int_equal(r.claim.status, 200);
    assert_string_equal(r.claim.response, "{\"id\":1}");
    txo_idem_claim_release(&r.claim);
}

static void test_rollback_leaves_no_row(void **state)
{
    struct testdb *t = *state;
    char hash[TXO_IDEM_HASH_LEN];
    hash_of("POST", "/orders", "{\"sku\":\"B\"}", hash);

    /* The effect fails after begin and complete: everything is rolled back. */
    struct idem_call c = {.key = "key-rb",
                          .hash = hash,
                          .stale_s = 3600,
                          .complete_status = 201,
                          .complete_body = "{\"order_id\":1}",
                          .fail_with = TXO_EBUSINESS};
    assert_int_equal(run_call(t->db, &c), TXO_EBUSINESS);
    assert_int_equal(c.claim.outcome, TXO_IDEM_NEW);
    assert_int_equal(c.complete_rc, 0);
    txo_idem_claim_release(&c.claim);
    assert_int_equal(key_rows(t->db), 0);

    /* The retry starts fresh and may even use another body. */
    char other[TXO_IDEM_HASH_LEN];
    hash_of("POST", "/orders", "{\"sku\":\"C\"}", other);
    struct idem_call again = {.key = "key-rb",
                              .hash = other,
                              .stale_s = 3600,
                              .complete_status = 201,
                              .complete_body = "{\"order_id\":2}"};
    assert_int_equal(run_call(t->db, &again), 0);
    assert_int_equal(again.claim.outcome, TXO_IDEM_NEW);
    assert_false(again.claim.taken_over);
    txo_idem_claim_release(&again.claim);
    assert_int_equal(key_rows(t->db), 1);
}

/* ---- two connections ---- */

/* Transaction A: begin (NEW), then hold the transaction open until told to go on. */
struct holder {
    struct txo_db *db;
    const char *key;
    const char *hash;
    int finish_with; /* 0: complete and commit; else roll back with it */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool began;
    bool go;
    int rc; /* of txo_db_transact */
    enum txo_idem_outcome outcome;
    unsigned attempts;
};

static int holder_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct holder *h = arg;
    struct txo_idem_claim claim;
    h->attempts++;
    int rc = txo_idem_begin(tx, h->key, h->hash, 3600, &claim, err);
    if (rc != 0)
        return rc;
    h->outcome = claim.outcome;
    txo_idem_claim_release(&claim);
    pthread_mutex_lock(&h->mu);
    h->began = true;
    pthread_cond_broadcast(&h->cv);
    while (!h->go)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    if (h->finish_with != 0)
        return txo_error_set(err, h->finish_with, "the effect failed");
    return txo_idem_complete(tx, h->key, 201, "{\"order_id\": 7}", err);
}

static void *holder_main(void *arg)
{
    struct holder *h = arg;
    struct txo_error err;
    txo_error_init(&err);
    h->rc = txo_db_transact(h->db, TXO_ISO_READ_COMMITTED, holder_fn, h, &err);
    return NULL;
}

static void holder_start(struct holder *h, pthread_t *th)
{
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    assert_int_equal(pthread_create(th, NULL, holder_main, h), 0);
    pthread_mutex_lock(&h->mu);
    while (!h->began)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

static void holder_release(struct holder *h)
{
    pthread_mutex_lock(&h->mu);
    h->go = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static void holder_join(struct holder *h, pthread_t th)
{
    pthread_join(th, NULL);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
}

static struct txo_db *connect_with_lock_wait(const struct testdb *t, unsigned lock_wait_s)
{
    struct txo_db_opts opts = t->opts;
    opts.lock_wait_timeout_s = lock_wait_s;
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_open(&opts, &db, &err) != 0)
        fail_msg("connect: %s", err.msg);
    return db;
}

/* B's transaction: begin, then prove the transaction is still usable. */
struct waiter {
    struct idem_call call;
    int select_rc;
};

static int waiter_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct waiter *w = arg;
    int rc = idem_fn(tx, &w->call, err);
    if (rc != 0)
        return rc;
    struct txo_rows *rows = NULL;
    w->select_rc = txo_tx_query(tx, "SELECT 1", NULL, 0, &rows, err);
    txo_rows_free(rows);
    return w->select_rc;
}

static void test_concurrent_request_in_progress_then_replay(void **state)
{
    struct testdb *t = *state;
    char hash[TXO_IDEM_HASH_LEN];
    hash_of("POST", "/orders", "{\"sku\":\"D\"}", hash);

    struct holder h = {.db = testdb_connect(t), .key = "key-c", .hash = hash};
    pthread_t th;
    holder_start(&h, &th);
    assert_int_equal(h.outcome, TXO_IDEM_NEW);

    /* B waits for A's row lock for lock_wait_timeout_s = 1, then reports IN_PROGRESS. */
    struct txo_db *b = connect_with_lock_wait(t, 1);
    struct waiter w = {.call = {.key = "key-c",
                                .hash = hash,
                                .stale_s = 3600,
                                .complete_status = 500,
                                .complete_body = "{}"}};
    txo_idem_claim_init(&w.call.claim);
    struct txo_error err;
    txo_error_init(&err);
    int64_t t0 = txo_monotonic_ms();
    int rc = txo_db_transact(b, TXO_ISO_READ_COMMITTED, waiter_fn, &w, &err);
    int64_t waited = txo_monotonic_ms() - t0;
    if (rc != 0)
        fail_msg("B's transaction failed: %s", err.msg);
    assert_int_equal(w.call.claim.outcome, TXO_IDEM_IN_PROGRESS);
    assert_int_equal(w.select_rc, 0);
    assert_true(waited >= 900); /* it did wait for the lock */
    assert_true(waited < 2500); /* once, not retried by txo_db_transact */
    txo_idem_claim_release(&w.call.claim);

    /* A is still open: nothing is visible yet. */
    assert_int_equal(key_rows(t->db), 0);

    holder_release(&h);
    holder_join(&h, th);
    assert_int_equal(h.rc, 0);
    assert_int_equal(h.attempts, 1);
    txo_db_close(h.db);

    /* Now B replays A's response. */
    struct idem_call again = {.key = "key-c",
                              .hash = hash,
                              .stale_s = 3600,
                              .complete_status = 500,
                              .complete_body = "{}"};
    assert_int_equal(run_call(b, &again), 0);
    assert_int_equal(again.claim.outcome, TXO_IDEM_REPLAY);
    assert_int_equal(again.claim.status, 201);
    assert_string_equal(again.claim.response, "{\"order_id\": 7}");
    txo_idem_claim_release(&again.claim);
    assert_int_equal(key_rows(t->db), 1);
    txo_db_close(b);
}

/* B runs in a thread while A holds the key, then A ends while B waits. */
struct waiting_b {
    struct txo_db *db;
    struct idem_call call;
    int rc;
    int64_t waited_ms;
};

static void *waiting_b_main(void *arg)
{
    struct waiting_b *b = arg;
    int64_t t0 = txo_monotonic_ms();
    b->rc = run_call(b->db, &b->call);
    b->waited_ms = txo_monotonic_ms() - t0;
    return NULL;
}

static void run_wait_then_finish(const struct testdb *t, int finish_with, struct waiting_b *b)
{
    char hash[TXO_IDEM_HASH_LEN];
    hash_of("POST", "/orders", "{\"sku\":\"E\"}", hash);
    static char hash_copy[TXO_IDEM_HASH_LEN];
    memcpy(hash_copy, hash, sizeof(hash));

    struct holder h = {
        .db = testdb_connect(t), .key = "key-w", .hash = hash_copy, .finish_with = finish_with};
    pthread_t ha;
    holder_start(&h, &ha);
    assert_int_equal(h.outcome, TXO_IDEM_NEW);

    b->db = connect_with_lock_wait(t, 10);
    b->call = (struct idem_call){.key = "key-w",
                                 .hash = hash_copy,
                                 .stale_s = 3600,
                                 .complete_status = 202,
                                 .complete_body = "{\"by\":\"B\"}"};
    pthread_t hb;
    assert_int_equal(pthread_create(&hb, NULL, waiting_b_main, b), 0);
    txo_sleep_ms(400); /* B is blocked on A's row lock */
    holder_release(&h);
    holder_join(&h, ha);
    pthread_join(hb, NULL);
    assert_int_equal(h.rc, finish_with);
    txo_db_close(h.db);
    txo_db_close(b->db);
    b->db = NULL;
    assert_true(b->waited_ms >= 300);
    assert_true(b->waited_ms < 5000);
}

static void test_waiter_replays_when_first_commits(void **state)
{
    struct testdb *t = *state;
    struct waiting_b b;
    run_wait_then_finish(t, 0, &b);
    assert_int_equal(b.rc, 0);
    assert_int_equal(b.call.claim.outcome, TXO_IDEM_REPLAY);
    assert_int_equal(b.call.claim.status, 201);
    assert_string_equal(b.call.claim.response, "{\"order_id\": 7}");
    assert_int_equal(b.call.complete_rc, 1);
    txo_idem_claim_release(&b.call.claim);
    char *row = row_of(t->db, "key-w");
    assert_non_null(row);
    assert_memory_equal(row, "COMPLETED|201|", 14);
    txo_free(row);
}

static void test_waiter_takes_key_when_first_rolls_back(void **state)
{
    struct testdb *t = *state;
    struct waiting_b b;
    run_wait_then_finish(t, TXO_EBUSINESS, &b);
    assert_int_equal(b.rc, 0);
    assert_int_equal(b.call.claim.outcome, TXO_IDEM_NEW);
    assert_false(b.call.claim.taken_over);
    assert_int_equal(b.call.complete_rc, 0);
    txo_idem_claim_release(&b.call.claim);
    char *row = row_of(t->db, "key-w");
    assert_non_null(row);
    assert_memory_equal(row, "COMPLETED|202|", 14);
    txo_free(row);
    assert_int_equal(key_rows(t->db), 1);
}

/* ---- abandoned rows ---- */

static void insert_processing(struct txo_db *db, const char *key, const char *hash)
{
    struct txo_param p[] = {txo_p_str(key), txo_p_str(hash)};
    testsql_exec(db,
                 "INSERT INTO idempotency_keys (idempotency_key, request_hash, status)"
                 " VALUES (?, ?, 'PROCESSING')",
                 p, 2);
}

static void test_stale_processing_is_taken_over(void **state)
{
    struct testdb *t = *state;
    char hash[TXO_IDEM_HASH_LEN], other[TXO_IDEM_HASH_LEN];
    hash_of("POST", "/orders", "{\"sku\":\"F\"}", hash);
    hash_of("POST", "/orders", "{\"sku\":\"G\"}", other);
    /* A committed PROCESSING row: a writer that committed without completing, or died. */
    insert_processing(t->db, "key-s", hash);

    /* Fresh: somebody is on it. Nothing is written. */
    char *before = row_of(t->db, "key-s");
    struct idem_call c = {.key = "key-s",
                          .hash = hash,
                          .stale_s = 3600,
                          .complete_status = 201,
                          .complete_body = "{}"};
    assert_int_equal(run_call(t->db, &c), 0);
    assert_int_equal(c.claim.outcome, TXO_IDEM_IN_PROGRESS);
    assert_false(c.claim.taken_over);
    assert_int_equal(c.complete_rc, 1);
    txo_idem_claim_release(&c.claim);
    char *after = row_of(t->db, "key-s");
    assert_string_equal(after, before);
    txo_free(after);
    txo_free(before);

    /* Two hours without a change. */
    testdb_exec(t->db, "UPDATE idempotency_keys SET updated_at = NOW(6) - INTERVAL 2 HOUR"
                       " WHERE idempotency_key = 'key-s'");
    /* Not long enough for a 3-hour limit... */
    struct idem_call c3 = {.key = "key-s", .hash = hash, .stale_s = 3 * 3600};
    assert_int_equal(run_call(t->db, &c3), 0);
    assert_int_equal(c3.claim.outcome, TXO_IDEM_IN_PROGRESS);
    txo_idem_claim_release(&c3.claim);
    /* ...and another body is a conflict, stale or not. */
    struct idem_call x = {.key = "key-s", .hash = other, .stale_s = 3600};
    assert_int_equal(run_call(t->db, &x), 0);
    assert_int_equal(x.claim.outcome, TXO_IDEM_CONFLICT);
    assert_false(x.claim.taken_over);
    txo_idem_claim_release(&x.claim);
    assert_int_equal(testdb_i64(t->db,
                                "SELECT updated_at < NOW(6) - INTERVAL 1 HOUR FROM idempotency_keys"
                                " WHERE idempotency_key = 'key-s'",
                                NULL, 0),
                     1);

    /* Older than stale_s: ours now. */
    struct idem_call take = {.key = "key-s",
                             .hash = hash,
                             .stale_s = 3600,
                             .complete_status = 201,
                             .complete_body = "{\"order_id\":9}"};
    assert_int_equal(run_call(t->db, &take), 0);
    assert_int_equal(take.claim.outcome, TXO_IDEM_NEW);
    assert_true(take.claim.taken_over);
    assert_int_equal(take.complete_rc, 0);
    txo_idem_claim_release(&take.claim);
    char *row = row_of(t->db, "key-s");
    assert_non_null(row);
    assert_memory_equal(row, "COMPLETED|201|", 14);
    txo_free(row);
    assert_int_equal(testdb_i64(t->db,
                                "SELECT updated_at > NOW(6) - INTERVAL 1 MINUTE FROM"
                                " idempotency_keys WHERE idempotency_key = 'key-s'",
                                NULL, 0),
                     1);
    struct idem_call r = {.key = "key-s", .hash = hash, .stale_s = 3600};
    assert_int_equal(run_call(t->db, &r), 0);
    assert_int_equal(r.claim.outcome, TXO_IDEM_REPLAY);
    assert_string_equal(r.claim.response, "{\"order_id\":9}");
    txo_idem_claim_release(&r.claim);
    assert_int_equal(key_rows(t->db), 1);

    /* stale_s = 0: any PROCESSING row older than now is abandoned (after a second's age). */
    insert_processing(t->db, "key-s0", hash);
    testdb_exec(t->db, "UPDATE idempotency_keys SET updated_at = NOW(6) - INTERVAL 1 SECOND"
                       " WHERE idempotency_key = 'key-s0'");
    struct idem_call z = {.key = "key-s0",
                          .hash = hash,
                          .stale_s = 0,
                          .complete_status = 200,
                          .complete_body = "true"};
    assert_int_equal(run_call(t->db, &z), 0);
    assert_int_equal(z.claim.outcome, TXO_IDEM_NEW);
    assert_true(z.claim.taken_over);
    assert_int_equal(z.complete_rc, 0);
    txo_idem_claim_release(&z.claim);
    row = row_of(t->db, "key-s0");
    assert_memory_equal(row, "COMPLETED|200|", 14);
    txo_free(row);
}

/* ---- txo_idem_complete's errors ---- */

struct complete_only {
    const char *key;
    const char *body;
    int rc;
    struct txo_error err;
};

static int complete_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    (void)err;
    struct complete_only *c = arg;
    txo_error_init(&c->err);
    c->rc = txo_idem_complete(tx, c->key, 201, c->body, &c->err);
    return 0; /* commit whatever happened, so a wrong write would be visible */
}

static int run_complete(struct txo_db *db, struct complete_only *c)
{
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, complete_fn, c, &err);
    assert_int_equal(rc, 0);
    return c->rc;
}

static void test_complete_errors(void **state)
{
    struct testdb *t = *state;
    char hash[TXO_IDEM_HASH_LEN];
    hash_of("POST", "/orders", "{\"sku\":\"H\"}", hash);

    /* No begin at all: no row. */
    struct complete_only c = {.key = "key-none", .body = "{}"};
    assert_int_equal(run_complete(t->db, &c), TXO_ESTATE);
    assert_int_equal(c.err.code, TXO_ESTATE);
    assert_non_null(strstr(c.err.msg, "key-none"));
    assert_int_equal(key_rows(t->db), 0);

    /* A completed key cannot be completed again. */
    struct idem_call done = {.key = "key-done",
                             .hash = hash,
                             .stale_s = 3600,
                             .complete_status = 201,
                             .complete_body = "{\"v\":1}"};
    assert_int_equal(run_call(t->db, &done), 0);
    txo_idem_claim_release(&done.claim);
    struct complete_only twice = {.key = "key-done", .body = "{\"v\":2}"};
    assert_int_equal(run_complete(t->db, &twice), TXO_ESTATE);
    struct txo_param p = txo_p_str("key-done");
    char *body = testdb_str(t->db,
                            "SELECT response_body FROM idempotency_keys"
                            " WHERE idempotency_key = ?",
                            &p, 1);
    assert_string_equal(body, "{\"v\":1}");
    txo_free(body);

    /* Not JSON: refused before any SQL, the row stays PROCESSING and the tx rolls back. */
    const char *bad[] = {"{\"a\":", "", "not json", "{\"a\":1} trailing"};
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        struct idem_call nj = {.key = "key-nj",
                               .hash = hash,
                               .stale_s = 3600,
                               .complete_status = 201,
                               .complete_body = bad[i]};
        int rc = run_call(t->db, &nj);
        if (rc != TXO_EINVAL || nj.complete_rc != TXO_EINVAL)
            fail_msg("response %s: rc %d complete_rc %d", bad[i], rc, nj.complete_rc);
        txo_idem_claim_release(&nj.claim);
        assert_int_equal(testdb_i64(t->db,
                                    "SELECT COUNT(*) FROM idempotency_keys"
                                    " WHERE idempotency_key = 'key-nj'",
                                    NULL, 0),
                         0);
    }
}

/* ---- batches: txo_idem_lookup_many, txo_idem_store_completed_many ---- */

struct batch_call {
    const char *const *keys; /* lookup: n keys (NULL = no lookup) */
    size_t n;
    struct txo_idem_stored *out;
    const struct txo_idem_done *rows; /* store: n_rows rows (NULL = no store) */
    size_t n_rows;
    bool commit_after_store_error; /* commit even when the store failed (to see what it left) */
    int lookup_rc;
    int store_rc;
    struct txo_error call_err;
};

static int batch_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct batch_call *c = arg;
    c->lookup_rc = c->store_rc = 1; /* "not called" */
    txo_error_init(&c->call_err);
    if (c->rows != NULL) {
        c->store_rc = txo_idem_store_completed_many(tx, c->rows, c->n_rows, &c->call_err);
        if (c->store_rc != 0 && !c->commit_after_store_error) {
            *err = c->call_err;
            return c->store_rc;
        }
    }
    if (c->keys != NULL) {
        txo_idem_stored_release(c->out, c->n); /* from an earlier attempt */
        c->lookup_rc = txo_idem_lookup_many(tx, c->keys, c->n, c->out, &c->call_err);
        if (c->lookup_rc != 0) {
            *err = c->call_err;
            return c->lookup_rc;
        }
    }
    return 0;
}

static int run_batch(struct txo_db *db, struct batch_call *c)
{
    struct txo_error err;
    txo_error_init(&err);
    return txo_db_transact(db, TXO_ISO_READ_COMMITTED, batch_fn, c, &err);
}

static void test_lookup_many(void **state)
{
    struct testdb *t = *state;
    char h1[TXO_IDEM_HASH_LEN], h2[TXO_IDEM_HASH_LEN];
    hash_of("POST", "/orders", "{\"sku\":\"L1\"}", h1);
    hash_of("POST", "/orders", "{\"sku\":\"L2\"}", h2);
    /* One COMPLETED key (through the single path), one PROCESSING, one legacy row without a
     * response status. */
    struct idem_call done = {.key = "lk-done",
                             .hash = h1,
                             .stale_s = 3600,
                             .complete_status = 201,
                             .complete_body = "{\"order_id\": 7}"};
    assert_int_equal(run_call(t->db, &done), 0);
    txo_idem_claim_release(&done.claim);
    insert_processing(t->db, "lk-proc", h2);
    insert_legacy(t->db, "lk-legacy", h2);

    /* Present, absent, a key twice; 5 keys (the IN list rounds up to 8, last key repeated). */
    const char *keys[] = {"lk-done", "lk-absent", "lk-proc", "lk-done", "lk-legacy"};
    struct txo_idem_stored out[TXO_ARRAY_LEN(keys)];
    memset(out, 0, sizeof(out));
    struct batch_call c = {.keys = keys, .n = TXO_ARRAY_LEN(keys), .out = out};
    assert_int_equal(run_batch(t->db, &c), 0);
    assert_int_equal(c.lookup_rc, 0);
    for (size_t i = 0; i < 4; i += 3) {
        assert_int_equal(out[i].row, TXO_IDEM_ROW_COMPLETED);
        assert_string_equal(out[i].hash, h1);
        assert_int_equal(out[i].status, 201);
        assert_string_equal(out[i].response, "{\"order_id\": 7}");
    }
    assert_ptr_not_equal(out[0].response, out[3].response); /* each its own copy */
    assert_int_equal(out[1].row, TXO_IDEM_ROW_ABSENT);
    assert_string_equal(out[1].hash, "");
    assert_null(out[1].response);
    assert_int_equal(out[2].row, TXO_IDEM_ROW_PROCESSING);
    assert_string_equal(out[2].hash, h2);
    assert_null(out[2].response);
    assert_int_equal(out[4].row, TXO_IDEM_ROW_COMPLETED);
    assert_int_equal(out[4].status, 200); /* no response_status: 200, as txo_idem_begin */
    assert_string_equal(out[4].response, "{\"id\":1}");
    txo_idem_stored_release(out, TXO_ARRAY_LEN(keys));
    for (size_t i = 0; i < TXO_ARRAY_LEN(keys); i++) {
        assert_int_equal(out[i].row, TXO_IDEM_ROW_ABSENT);
        assert_null(out[i].response);
    }

    /* Keys are compared byte for byte: another case is another key. */
    const char *upper[] = {"LK-DONE"};
    struct txo_idem_stored one[1];
    memset(one, 0, sizeof(one));
    struct batch_call u = {.keys = upper, .n = 1, .out = one};
    assert_int_equal(run_batch(t->db, &u), 0);
    assert_int_equal(one[0].row, TXO_IDEM_ROW_ABSENT);
    txo_idem_stored_release(one, 1);

    /* A bad key fails before any SQL; n = 0 is nothing to do. */
    const char *bad[] = {"lk-done", "bad key"};
    struct txo_idem_stored two[2];
    memset(two, 0, sizeof(two));
    struct batch_call b = {.keys = bad, .n = 2, .out = two};
    assert_int_equal(run_batch(t->db, &b), TXO_EINVAL);
    assert_null(two[0].response);
    struct batch_call z = {.keys = keys, .n = 0, .out = NULL};
    assert_int_equal(run_batch(t->db, &z), 0);
    assert_int_equal(z.lookup_rc, 0);
}

static void test_store_completed_many(void **state)
{
    struct testdb *t = *state;
    char h[3][TXO_IDEM_HASH_LEN];
    hash_of("POST", "/orders", "{\"n\":0}", h[0]);
    hash_of("POST", "/orders", "{\"n\":1}", h[1]);
    hash_of("POST", "/orders", "{\"n\":2}", h[2]);
    const struct txo_idem_done rows[] = {
        {.key = "st-0", .hash = h[0], .status = 201, .response_json = "{\"order_id\":1}"},
        {.key = "st-1", .hash = h[1], .status = 202, .response_json = "{\"note\": \"Jürgen\"}"},
        {.key = "st-2", .hash = h[2], .status = 201, .response_json = "[1, 2]"},
    };
    const char *keys[] = {"st-0", "st-1", "st-2"};
    struct txo_idem_stored out[3];
    memset(out, 0, sizeof(out));
    struct batch_call c = {.rows = rows, .n_rows = 3, .keys = keys, .n = 3, .out = out};
    assert_int_equal(run_batch(t->db, &c), 0);
    assert_int_equal(c.store_rc, 0);
    /* Seen in the same transaction, and stored byte for byte. */
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(out[i].row, TXO_IDEM_ROW_COMPLETED);
        assert_string_equal(out[i].hash, h[i]);
        assert_int_equal(out[i].status, rows[i].status);
        assert_string_equal(out[i].response, rows[i].response_json);
    }
    txo_idem_stored_release(out, 3);
    assert_int_equal(key_rows(t->db), 3);
    char *row = row_of(t->db, "st-1");
    char expect[128];
    snprintf(expect, sizeof(expect), "COMPLETED|202|%s|", h[1]);
    assert_memory_equal(row, expect, strlen(expect));
    txo_free(row);

    /* The single path replays a stored key, and refuses another body with it. */
    struct idem_call r = {.key = "st-2", .hash = h[2], .stale_s = 3600};
    assert_int_equal(run_call(t->db, &r), 0);
    assert_int_equal(r.claim.outcome, TXO_IDEM_REPLAY);
    assert_int_equal(r.claim.status, 201);
    assert_string_equal(r.claim.response, "[1, 2]");
    txo_idem_claim_release(&r.claim);
    struct idem_call x = {.key = "st-2", .hash = h[0], .stale_s = 3600};
    assert_int_equal(run_call(t->db, &x), 0);
    assert_int_equal(x.claim.outcome, TXO_IDEM_CONFLICT);
    txo_idem_claim_release(&x.claim);

    /* One key of the batch exists already: 1062, TXO_EDUPLICATE, and none of the batch is
     * written even when the transaction commits. */
    const struct txo_idem_done dup[] = {
        {.key = "st-new", .hash = h[0], .status = 201, .response_json = "{}"},
        {.key = "st-1", .hash = h[1], .status = 201, .response_json = "{}"},
    };
    struct batch_call d = {.rows = dup, .n_rows = 2, .commit_after_store_error = true};
    assert_int_equal(run_batch(t->db, &d), 0);
    assert_int_equal(d.store_rc, TXO_EDUPLICATE);
    assert_int_equal(d.call_err.code, TXO_EDUPLICATE);
    assert_int_equal(key_rows(t->db), 3);
    assert_null(row_of(t->db, "st-new"));
    /* The same key twice in one batch is the same error. */
    const struct txo_idem_done twice[] = {
        {.key = "st-twice", .hash = h[0], .status = 201, .response_json = "{}"},
        {.key = "st-twice", .hash = h[0], .status = 201, .response_json = "{}"},
    };
    struct batch_call tw = {.rows = twice, .n_rows = 2};
    assert_int_equal(run_batch(t->db, &tw), TXO_EDUPLICATE);
    assert_int_equal(key_rows(t->db), 3);

    /* A response that is not JSON, a bad key, a missing hash: refused before any write (the
     * transaction commits, and nothing of the batch is there). */
    const char *bad_json[] = {"{\"a\":", "", "not json", "{\"a\":1} trailing", NULL};
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad_json); i++) {
        const struct txo_idem_done b[] = {
            {.key = "st-b0", .hash = h[0], .status = 201, .response_json = "{}"},
            {.key = "st-b1", .hash = h[1], .status = 201, .response_json = bad_json[i]},
        };
        struct batch_call bc = {.rows = b, .n_rows = 2, .commit_after_store_error = true};
        assert_int_equal(run_batch(t->db, &bc), 0);
        if (bc.store_rc != TXO_EINVAL)
            fail_msg("response %s: rc %d", bad_json[i] != NULL ? bad_json[i] : "NULL", bc.store_rc);
        assert_non_null(strstr(bc.call_err.msg, "st-b1"));
        assert_int_equal(key_rows(t->db), 3);
    }
    const struct txo_idem_done bad_key[] = {
        {.key = "st-ok", .hash = h[0], .status = 201, .response_json = "{}"},
        {.key = "bad key", .hash = h[0], .status = 201, .response_json = "{}"},
    };
    struct batch_call bk = {.rows = bad_key, .n_rows = 2, .commit_after_store_error = true};
    assert_int_equal(run_batch(t->db, &bk), 0);
    assert_int_equal(bk.store_rc, TXO_EINVAL);
    const struct txo_idem_done no_hash[] = {
        {.key = "st-nh", .hash = NULL, .status = 201, .response_json = "{}"}};
    struct batch_call nh = {.rows = no_hash, .n_rows = 1, .commit_after_store_error = true};
    assert_int_equal(run_batch(t->db, &nh), 0);
    assert_int_equal(nh.store_rc, TXO_EINVAL);
    assert_int_equal(key_rows(t->db), 3);

    /* n = 0 writes nothing. */
    struct batch_call e = {.rows = rows, .n_rows = 0};
    assert_int_equal(run_batch(t->db, &e), 0);
    assert_int_equal(e.store_rc, 0);
    assert_int_equal(key_rows(t->db), 3);
}

/* A key another transaction inserted and holds uncommitted: the lookup does not see it (and
 * does not wait), the batch insert waits for it and fails with 1062 once it commits. */
struct racer {
    struct txo_db *db;
    struct txo_idem_stored out[2];
    struct batch_call call;
    int rc;
};

static void *racer_main(void *arg)
{
    struct racer *r = arg;
    r->rc = run_batch(r->db, &r->call);
    return NULL;
}

static void test_store_completed_many_waits_then_1062(void **state)
{
    struct testdb *t = *state;
    char hash[TXO_IDEM_HASH_LEN];
    hash_of("POST", "/orders", "{\"race\":1}", hash);
    struct holder h = {.db = t->db, .key = "race-key", .hash = hash};
    pthread_t th;
    holder_start(&h, &th);

    struct txo_db *db2 = connect_with_lock_wait(t, 30);
    const char *keys[] = {"race-key", "race-other"};
    const struct txo_idem_done rows[] = {
        {.key = "race-other", .hash = hash, .status = 201, .response_json = "{}"},
        {.key = "race-key", .hash = hash, .status = 201, .response_json = "{}"},
    };
    struct racer r = {.db = db2};
    memset(r.out, 0, sizeof(r.out));
    r.call = (struct batch_call){.keys = keys, .n = 2, .out = r.out};
    assert_int_equal(run_batch(db2, &r.call), 0);
    assert_int_equal(r.out[0].row, TXO_IDEM_ROW_ABSENT); /* invisible, and no wait */
    txo_idem_stored_release(r.out, 2);

    r.call = (struct batch_call){.rows = rows, .n_rows = 2};
    pthread_t rt;
    assert_int_equal(pthread_create(&rt, NULL, racer_main, &r), 0);
    txo_sleep_ms(300); /* the insert waits for the holder's row lock (or comes after: 1062 too) */
    holder_release(&h);
    holder_join(&h, th);
    assert_int_equal(pthread_join(rt, NULL), 0);
    assert_int_equal(r.rc, TXO_EDUPLICATE);
    assert_int_equal(r.call.store_rc, TXO_EDUPLICATE);
    assert_null(row_of(t->db, "race-other"));
    txo_db_close(db2);
}

/* ---- retention ---- */

/* A row in status, created and last updated age_s seconds ago. */
static void insert_aged(struct txo_db *db, const char *key, const char *status, int64_t age_s)
{
    struct txo_param p[] = {txo_p_str(key), txo_p_str(status), txo_p_i64(age_s), txo_p_i64(age_s)};
    testsql_exec(db,
                 "INSERT INTO idempotency_keys (idempotency_key, request_hash, status,"
                 " response_status, response_body, created_at, updated_at) VALUES (?,"
                 " REPEAT('a', 64), ?, 201, '{}', NOW(6) - INTERVAL ? SECOND,"
                 " NOW(6) - INTERVAL ? SECOND)",
                 p, 4);
}

static void test_purge(void **state)
{
    struct testdb *t = *state;
    for (int i = 0; i < 5; i++) {
        char key[32];
        snprintf(key, sizeof(key), "old-%d", i);
        insert_aged(t->db, key, "COMPLETED", i == 0 ? 2 * 86400 : 25 * 3600);
    }
    insert_aged(t->db, "recent", "COMPLETED", 23 * 3600);
    insert_aged(t->db, "new", "COMPLETED", 0);
    insert_aged(t->db, "old-processing", "PROCESSING", 3 * 86400);
    insert_aged(t->db, "old-failed", "FAILED", 3 * 86400);
    assert_int_equal(key_rows(t->db), 9);

    struct txo_error err;
    txo_error_init(&err);
    uint64_t deleted = 99;
    /* One batch only. */
    assert_int_equal(txo_idem_purge(t->db, 24 * 3600, 2, 1, &deleted, &err), 0);
    assert_int_equal(deleted, 2);
    assert_int_equal(key_rows(t->db), 7);
    /* The oldest went first. */
    assert_int_equal(testdb_i64(t->db,
                                "SELECT COUNT(*) FROM idempotency_keys"
                                " WHERE idempotency_key = 'old-0'",
                                NULL, 0),
                     0);

    /* Until none is left, two per batch. */
    assert_int_equal(txo_idem_purge(t->db, 24 * 3600, 2, 0, &deleted, &err), 0);
    assert_int_equal(deleted, 3);
    assert_int_equal(key_rows(t->db), 4);
    char *left = testdb_str(t->db,
                            "SELECT GROUP_CONCAT(idempotency_key ORDER BY idempotency_key)"
                            " FROM idempotency_keys",
                            NULL, 0);
    assert_string_equal(left, "new,old-failed,old-processing,recent");
    txo_free(left);

    /* Nothing more to do; a NULL count is fine. */
    assert_int_equal(txo_idem_purge(t->db, 24 * 3600, 2, 0, &deleted, &err), 0);
    assert_int_equal(deleted, 0);
    assert_int_equal(txo_idem_purge(t->db, 24 * 3600, 100, 0, NULL, &err), 0);
    assert_int_equal(key_rows(t->db), 4);

    /* 5 old rows in batches of 2 in one call (2 + 2 + 1). */
    for (int i = 0; i < 5; i++) {
        char key[32];
        snprintf(key, sizeof(key), "again-%d", i);
        insert_aged(t->db, key, "COMPLETED", 48 * 3600);
    }
    assert_int_equal(txo_idem_purge(t->db, 24 * 3600, 2, 0, &deleted, &err), 0);
    assert_int_equal(deleted, 5);
    assert_int_equal(key_rows(t->db), 4);

    /* A smaller age reaches the recent one, never PROCESSING or FAILED. */
    assert_int_equal(txo_idem_purge(t->db, 3600, 10, 0, &deleted, &err), 0);
    assert_int_equal(deleted, 1);
    left = testdb_str(t->db,
                      "SELECT GROUP_CONCAT(idempotency_key ORDER BY idempotency_key)"
                      " FROM idempotency_keys",
                      NULL, 0);
    assert_string_equal(left, "new,old-failed,old-processing");
    txo_free(left);

    txo_error_init(&err);
    assert_int_equal(txo_idem_purge(t->db, 3600, 0, 0, &deleted, &err), TXO_EINVAL);
    assert_int_equal(deleted, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_hash_is_canonical, testrun_no_fixture),
        cmocka_unit_test_setup(test_hash_rejects_malformed_json, testrun_no_fixture),
        cmocka_unit_test_setup(test_key_check, testrun_no_fixture),
        cmocka_unit_test(test_new_complete_replay_conflict),
        cmocka_unit_test(test_replay_of_row_without_status),
        cmocka_unit_test(test_rollback_leaves_no_row),
        cmocka_unit_test(test_concurrent_request_in_progress_then_replay),
        cmocka_unit_test(test_waiter_replays_when_first_commits),
        cmocka_unit_test(test_waiter_takes_key_when_first_rolls_back),
        cmocka_unit_test(test_stale_processing_is_taken_over),
        cmocka_unit_test(test_complete_errors),
        cmocka_unit_test(test_lookup_many),
        cmocka_unit_test(test_store_completed_many),
        cmocka_unit_test(test_store_completed_many_waits_then_1062),
        cmocka_unit_test(test_purge),
    };
    txo_log_set_level(TXO_LOG_ERROR);
    return testdb_run_each(tests, TXO_ARRAY_LEN(tests), "idem", 0, NULL);
}
