#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <time.h>

#include "testpartition.h"
#include "testproc.h"
#include "txo/clock.h"

int testpartition_txo(const char *action, enum txo_partition_table table, const char *extra)
{
    const char *which = table == TXO_PARTITION_INBOX ? "inbox" : "outbox";
    const char *args[] = {"partition", action, which, "--partition-batch=300", extra, NULL};
    char *out = NULL;
    int rc = testproc_run_txo("partition", args, 120000, &out);
    print_message("txo partition %s %s: %d\n%s", action, which, rc, out);
    free(out);
    return rc;
}

bool testpartition_enabled(struct txo_db *db, enum txo_partition_table table)
{
    bool yes = false;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_partition_is_enabled(db, table, &yes, &err) < 0)
        fail_msg("reading the layout of %s: %s", txo_partition_table_name(table), err.msg);
    return yes;
}

/* ---- writes between the copy triggers ---- */

/* What the chain needs of a table: a write that matches no row (it takes the metadata lock a
 * write takes and locks no row), and the LIKE patterns of its copy triggers' names and of
 * their DDL as the process list shows it. */
struct chain_table {
    const char *no_row_write, *trigger_like, *ddl_like;
};

static const struct chain_table chain_tables[] = {
    [TXO_PARTITION_OUTBOX] = {"UPDATE outbox_events SET attempts = attempts WHERE id = 0",
                              "outbox\\_events\\_txo\\_copy\\_%",
                              "%CREATE TRIGGER outbox\\_events\\_txo\\_copy%"},
    [TXO_PARTITION_INBOX] = {"UPDATE inbox_events SET processed_at = processed_at "
                             "WHERE event_id = ''",
                             "inbox\\_events\\_txo\\_copy\\_%",
                             "%CREATE TRIGGER inbox\\_events\\_txo\\_copy%"},
};

#define SQL_COPY_TRIGGERS                                                                          \
    "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() AND "      \
    "TRIGGER_NAME LIKE ?"
#define SQL_WAITING_FOR_LOCK                                                                       \
    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'Waiting for table "        \
    "metadata lock' AND "

/* One transaction of the chain: holds the lock until released; the last one writes. */
struct holder {
    const struct chain_table *table;
    struct txo_db *db;
    int64_t conn_id;
    txo_tx_fn write; /* NULL: only hold */
    void *arg;
    int64_t triggers; /* copy triggers there when it wrote; -1: its transaction failed */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool holding, released;
    pthread_t thread;
};

static int holder_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct holder *h = arg;
    int rc = txo_tx_exec(tx, h->table->no_row_write, NULL, 0, NULL, err);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&h->mu);
    h->holding = true;
    pthread_cond_broadcast(&h->cv);
    while (!h->released)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    if (h->write == NULL)
        return 0;
    struct txo_param like = txo_p_str(h->table->trigger_like);
    struct txo_rows *rows = NULL;
    rc = txo_tx_query(tx, SQL_COPY_TRIGGERS, &like, 1, &rows, err);
    if (rc < 0)
        return rc;
    h->triggers = txo_rows_i64(rows, 0, 0);
    txo_rows_free(rows);
    return h->write(tx, h->arg, err);
}

static void *holder_main(void *arg)
{
    struct holder *h = arg;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_transact(h->db, TXO_ISO_READ_COMMITTED, holder_tx, h, &err) != 0) {
        print_error("lock holder: %s\n", err.msg);
        h->triggers = -1;
    }
    return NULL;
}

static void holder_start(struct testdb *t, const struct chain_table *table, struct holder *h,
                         txo_tx_fn write, void *arg)
{
    memset(h, 0, sizeof(*h));
    h->table = table;
    h->db = testdb_connect(t);
    h->conn_id = testdb_q(h->db, "SELECT CONNECTION_ID()");
    h->write = write;
    h->arg = arg;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    assert_int_equal(pthread_create(&h->thread, NULL, holder_main, h), 0);
}

static void holder_wait(struct holder *h)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&h->mu);
    while (!h->holding && pthread_cond_timedwait(&h->cv, &h->mu, &until) == 0) {
    }
    bool holding = h->holding;
    pthread_mutex_unlock(&h->mu);
    if (!holding)
        fail_msg("a lock holder waited 10 s for the table's metadata lock");
}

/* Lets it commit (after its write) and waits for it: the copy triggers there when it wrote. */
static int64_t holder_release(struct holder *h)
{
    pthread_mutex_lock(&h->mu);
    h->released = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    txo_db_close(h->db);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    return h->triggers;
}

/* Polls a count until it is positive; fails the test after 10 s. */
static void wait_for(struct txo_db *db, const char *what, const char *sql, struct txo_param p)
{
    for (int i = 0; i < 2000; i++) {
        if (testdb_i64(db, sql, &p, 1) > 0)
            return;
        txo_sleep_ms(5);
    }
    fail_msg("waited 10 s for %s", what);
}

/* `txo partition ACTION TABLE` on a thread of its own. */
struct change_run {
    const char *action;
    enum txo_partition_table table;
    int rc;
    pthread_t thread;
};

static void *change_main(void *arg)
{
    struct change_run *c = arg;
    c->rc = testpartition_txo(c->action, c->table, NULL);
    return NULL;
}

/*
 * `txo partition ACTION TABLE` with write(tx, arg) in the transaction right after its k-th copy
 * trigger (k = 1 or 2). Returns how many copy triggers there were when write ran.
 */
static int64_t change_with_write_after(struct testdb *t, const char *action,
                                       enum txo_partition_table table, int k, txo_tx_fn write,
                                       void *arg)
{
    const struct chain_table *ct = &chain_tables[table];
    struct holder h[3];
    assert_true(k >= 1 && k < (int)(sizeof(h) / sizeof(h[0])));
    holder_start(t, ct, &h[0], NULL, NULL);
    holder_wait(&h[0]); /* nothing waits for the lock yet */
    struct change_run run = {.action = action, .table = table};
    assert_int_equal(pthread_create(&run.thread, NULL, change_main, &run), 0);
    for (int j = 1; j <= k; j++) {
        wait_for(t->db, "a copy trigger's DDL waiting", SQL_WAITING_FOR_LOCK "INFO LIKE ?",
                 txo_p_str(ct->ddl_like));
        holder_start(t, ct, &h[j], j == k ? write : NULL, arg);
        wait_for(t->db, "the next lock holder waiting", SQL_WAITING_FOR_LOCK "ID = ?",
                 txo_p_i64(h[j].conn_id));
        holder_release(&h[j - 1]);
        holder_wait(&h[j]);
    }
    int64_t triggers = holder_release(&h[k]);
    pthread_join(run.thread, NULL);
    assert_int_equal(run.rc, 0);
    assert_true(triggers >= 0);
    print_message("%s %s: written after %lld of 3 copy triggers\n", action,
                  txo_partition_table_name(table), (long long)triggers);
    return triggers;
}

/* The keys of round r (struct testpartition_writes). */
struct round_keys {
    char updated[48], deleted[48], old_updated[48], old_deleted[48];
};

static struct round_keys round_keys(const struct testpartition_writes *w, int round)
{
    struct round_keys k;
    snprintf(k.updated, sizeof(k.updated), "between-%d-updated", round);
    snprintf(k.deleted, sizeof(k.deleted), "between-%d-deleted", round);
    snprintf(k.old_updated, sizeof(k.old_updated), "%s%d", w->old_key, 10 * round + 1);
    snprintf(k.old_deleted, sizeof(k.old_deleted), "%s%d", w->old_key, 10 * round + 2);
    return k;
}

struct round {
    const struct testpartition_writes *w;
    int n;
};

static int write_round(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    const struct round *r = arg;
    struct round_keys k = round_keys(r->w, r->n);
    const char *const steps[][2] = {
        {r->w->insert, k.updated}, {r->w->update, k.updated},     {r->w->insert, k.deleted},
        {r->w->delete, k.deleted}, {r->w->update, k.old_updated}, {r->w->delete, k.old_deleted},
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        struct txo_param p = txo_p_str(steps[i][1]);
        int rc = txo_tx_exec(tx, steps[i][0], &p, 1, NULL, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void expect_count(struct txo_db *db, const char *sql, const char *key, int64_t want,
                         const char *what)
{
    struct txo_param p = txo_p_str(key);
    int64_t got = testdb_i64(db, sql, &p, 1);
    if (got != want)
        fail_msg("%s: %lld rows %s, want %lld", key, (long long)got, what, (long long)want);
}

void testpartition_writes_between_triggers(struct testdb *t, const struct testpartition_writes *w)
{
    bool seen[3] = {false, false, false};
    const char *action = "enable";
    for (int n = 0; n < 8 && !(seen[1] && seen[2]); n++) {
        struct round r = {w, n};
        int64_t triggers =
            change_with_write_after(t, action, w->table, seen[1] ? 2 : 1, write_round, &r);
        if (triggers >= 1 && triggers <= 2)
            seen[triggers] = true;
        struct round_keys k = round_keys(w, n);
        expect_count(t->db, w->count_updated, k.updated, 1, "updated");
        expect_count(t->db, w->count_updated, k.old_updated, 1, "updated");
        expect_count(t->db, w->count_key, k.deleted, 0, "after its delete");
        expect_count(t->db, w->count_key, k.old_deleted, 0, "after its delete");
        if (w->check_keys != NULL && testpartition_enabled(t->db, w->table))
            w->check_keys(t->db);
        action = strcmp(action, "enable") == 0 ? "disable" : "enable";
    }
    assert_true(seen[1] && seen[2]);
}
