/*
 * The process registry (include/txo/registry.h) against a real MariaDB: register, heartbeat,
 * list (alive and stale, on the database's clock), unregister, purge of rows stale for long,
 * a row purged under a running process, the heartbeat thread end to end (its row appears with
 * the breaker states of its callback, follows their changes, and is gone after a clean stop),
 * and a database without txo_processes (a relay-only schema): the functions say TXO_ENOTFOUND
 * and the heartbeat thread logs one line for it, however many beats fail.
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

#include "testrun.h"
#include "testdb.h"
#include "txo/registry.h"

static int setup(void **state)
{
    *state = testdb_new("registry", 0);
    return 0;
}

static int setup_outbox_only(void **state)
{
    *state = testdb_new("registry_outbox", TESTDB_NEW_OUTBOX_ONLY);
    return 0;
}

static int teardown(void **state)
{
    txo_log_set_sink(NULL, NULL);
    testdb_free(*state);
    return 0;
}

static struct txo_process_id fake(const char *owner, const char *role)
{
    struct txo_process_id id = {
        .owner = owner, .role = role, .host = "hostA", .pid = 42, .version = "9.9.9"};
    return id;
}

static const struct txo_process *find(const struct txo_process *ps, size_t n, const char *owner)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(ps[i].owner, owner) == 0)
            return &ps[i];
    return NULL;
}

static void test_register_heartbeat_list_unregister(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct txo_process_id relay = fake("hostA:42:relay", "relay");
    struct txo_process_id worker = fake("hostA:43:worker", "worker");
    worker.pid = 43;
    assert_int_equal(
        txo_registry_register(t->db, &relay, "{\"breakers\":{\"publisher\":\"open\"}}", &err), 0);
    assert_int_equal(txo_registry_register(t->db, &worker, NULL, &err), 0);
    /* The worker has not beaten for a minute: stale; the relay beats now. */
    testdb_exec(t->db, "UPDATE txo_processes SET heartbeat_at = NOW(6) - INTERVAL 60 SECOND "
                       "WHERE owner = 'hostA:43:worker'");
    bool found = false;
    assert_int_equal(txo_registry_heartbeat(t->db, "hostA:42:relay",
                                            "{\"breakers\":{\"publisher\":\"closed\"}}", &found,
                                            &err),
                     0);
    assert_true(found);

    struct txo_process *ps = NULL;
    size_t n = 0;
    assert_int_equal(txo_registry_list(t->db, 15, &ps, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(ps[0].owner, "hostA:42:relay"); /* newest beat first */
    const struct txo_process *r = find(ps, n, "hostA:42:relay");
    const struct txo_process *w = find(ps, n, "hostA:43:worker");
    assert_non_null(r);
    assert_non_null(w);
    assert_true(r->alive);
    assert_false(w->alive);
    assert_true(w->heartbeat_age_s >= 59.0 && w->heartbeat_age_s < 120.0);
    assert_true(r->heartbeat_age_s < 10.0);
    assert_string_equal(r->role, "relay");
    assert_string_equal(r->host, "hostA");
    assert_int_equal(r->pid, 42);
    assert_string_equal(r->version, "9.9.9");
    assert_string_equal(r->status, "{\"breakers\":{\"publisher\":\"closed\"}}");
    assert_string_equal(w->status, "{}");
    assert_int_equal(strlen(r->started_at), 27); /* 2026-12-01T12:00:00.123456Z */
    assert_int_equal(r->started_at[26], 'Z');
    txo_processes_free(ps, n);

    /* A wider window makes the worker alive again: liveness is the caller's window. */
    assert_int_equal(txo_registry_list(t->db, 120, &ps, &n, &err), 0);
    assert_true(find(ps, n, "hostA:43:worker")->alive);
    txo_processes_free(ps, n);

    assert_int_equal(txo_registry_unregister(t->db, "hostA:42:relay", &err), 0);
    assert_int_equal(txo_registry_unregister(t->db, "hostA:42:relay", &err), 0); /* no row: ok */
    assert_int_equal(txo_registry_heartbeat(t->db, "hostA:42:relay", NULL, &found, &err), 0);
    assert_false(found); /* gone: the heartbeat thread would register again */
    assert_int_equal(txo_registry_list(t->db, 15, &ps, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(ps[0].owner, "hostA:43:worker");
    txo_processes_free(ps, n);

    /* Registering an owner that is there replaces its row (a restart with the same name). */
    worker.version = "10.0.0";
    assert_int_equal(txo_registry_register(t->db, &worker, NULL, &err), 0);
    assert_int_equal(txo_registry_list(t->db, 15, &ps, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_true(ps[0].alive);
    assert_string_equal(ps[0].version, "10.0.0");
    txo_processes_free(ps, n);
}

static void test_bad_arguments(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    char long_role[64];
    memset(long_role, 'r', sizeof(long_role) - 1);
    long_role[sizeof(long_role) - 1] = '\0';
    struct txo_process_id id = fake("x", long_role);
    assert_int_equal(txo_registry_register(t->db, &id, NULL, &err), TXO_EINVAL);
    id = fake("", "relay");
    assert_int_equal(txo_registry_register(t->db, &id, NULL, &err), TXO_EINVAL);
    struct txo_process *ps = NULL;
    size_t n = 0;
    assert_int_equal(txo_registry_list(t->db, 0, &ps, &n, &err), TXO_EINVAL);
    assert_int_equal(txo_registry_purge(t->db, 0, NULL, &err), TXO_EINVAL);
    struct txo_heartbeat_opts ho;
    txo_heartbeat_opts_init(&ho);
    struct txo_heartbeat *hb = NULL;
    assert_int_equal(txo_heartbeat_start(&t->opts, &ho, &hb, &err), TXO_EINVAL); /* no role */
    assert_null(hb);
}

static void test_purge_deletes_only_long_stale_rows(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct txo_process_id a = fake("hostA:1:relay", "relay");
    struct txo_process_id b = fake("hostA:2:relay", "relay");
    assert_int_equal(txo_registry_register(t->db, &a, NULL, &err), 0);
    assert_int_equal(txo_registry_register(t->db, &b, NULL, &err), 0);
    testdb_exec(t->db, "UPDATE txo_processes SET heartbeat_at = NOW(6) - INTERVAL 7 HOUR "
                       "WHERE owner = 'hostA:1:relay'");
    uint64_t deleted = 0;
    assert_int_equal(txo_registry_purge(t->db, 6 * 3600, &deleted, &err), 0);
    assert_int_equal(deleted, 1);
    assert_int_equal(testdb_i64(t->db, "SELECT COUNT(*) FROM txo_processes", NULL, 0), 1);
    assert_int_equal(testdb_i64(t->db,
                                "SELECT COUNT(*) FROM txo_processes WHERE owner = 'hostA:2:relay'",
                                NULL, 0),
                     1);
}

/* ---- the heartbeat thread ---- */

struct breakers {
    pthread_mutex_t mu;
    enum txo_breaker_state payment;
};

static size_t report_breakers(void *arg, struct txo_heartbeat_breaker *out, size_t cap)
{
    struct breakers *b = arg;
    if (cap < 2)
        return 0;
    pthread_mutex_lock(&b->mu);
    out[0] = (struct txo_heartbeat_breaker){.name = "payment", .state = b->payment};
    out[1] = (struct txo_heartbeat_breaker){.name = "shipment", .state = TXO_BREAKER_HALF_OPEN};
    pthread_mutex_unlock(&b->mu);
    return 2;
}

/* Waits up to 5 s for the query to return want. */
static bool wait_i64(struct txo_db *db, const char *sql, const struct txo_param *p, size_t n,
                     int64_t want)
{
    int64_t t0 = txo_monotonic_ms();
    while (txo_monotonic_ms() - t0 < 5000) {
        if (testdb_i64(db, sql, p, n) == want)
            return true;
        txo_sleep_ms(20);
    }
    return false;
}

static void test_heartbeat_thread_registers_beats_and_leaves(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct breakers b = {.payment = TXO_BREAKER_CLOSED};
    pthread_mutex_init(&b.mu, NULL);
    struct txo_heartbeat_opts ho;
    txo_heartbeat_opts_init(&ho);
    ho.role = "worker";
    ho.version = "1.2.3";
    ho.interval_ms = 50;
    ho.breakers = report_breakers;
    ho.breakers_arg = &b;
    struct txo_heartbeat *hb = NULL;
    assert_int_equal(txo_heartbeat_start(&t->opts, &ho, &hb, &err), 0);
    const char *owner = txo_heartbeat_owner(hb);
    char want[300];
    assert_int_equal(txo_owner_name(want, sizeof(want), "worker"), 0);
    assert_string_equal(owner, want);
    struct txo_param p[] = {txo_p_str(owner)};
    assert_true(wait_i64(t->db,
                         "SELECT COUNT(*) FROM txo_processes WHERE owner = ? AND role = 'worker' "
                         "AND version = '1.2.3' AND status = "
                         "'{\"breakers\":{\"payment\":\"closed\",\"shipment\":\"half_open\"}}'",
                         p, 1, 1));
    pthread_mutex_lock(&b.mu);
    b.payment = TXO_BREAKER_OPEN;
    pthread_mutex_unlock(&b.mu);
    assert_true(wait_i64(t->db,
                         "SELECT COUNT(*) FROM txo_processes WHERE owner = ? AND "
                         "JSON_VALUE(status, '$.breakers.payment') = 'open'",
                         p, 1, 1));
    /* Someone (a purge while we were cut off) deletes the row: the next beat puts it back. */
    testdb_exec(t->db, "DELETE FROM txo_processes");
    assert_true(wait_i64(t->db, "SELECT COUNT(*) FROM txo_processes WHERE owner = ?", p, 1, 1));
    struct txo_process *ps = NULL;
    size_t n = 0;
    assert_int_equal(txo_registry_list(t->db, 5, &ps, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_true(ps[0].alive);
    txo_processes_free(ps, n);
    txo_heartbeat_stop(hb);
    assert_int_equal(testdb_i64(t->db, "SELECT COUNT(*) FROM txo_processes", NULL, 0), 0);
    pthread_mutex_destroy(&b.mu);
}

struct log_count {
    pthread_mutex_t mu;
    unsigned registry_lines;
    char last[512];
};

static void count_registry_lines(enum txo_log_level level, const char *component, const char *msg,
                                 const struct txo_log_field *fields, size_t n_fields, void *arg)
{
    struct log_count *c = arg;
    if (strcmp(component, "registry") != 0)
        return;
    pthread_mutex_lock(&c->mu);
    c->registry_lines++;
    txo_log_format_line(c->last, sizeof(c->last), TXO_LOG_FORMAT_LOGFMT, "-", level, component, msg,
                        fields, n_fields);
    pthread_mutex_unlock(&c->mu);
}

static void test_missing_table(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct txo_process_id id = fake("hostA:1:relay", "relay");
    assert_int_equal(txo_registry_register(t->db, &id, NULL, &err), TXO_ENOTFOUND);
    assert_non_null(strstr(err.msg, "txo_processes"));
    bool found = true;
    assert_int_equal(txo_registry_heartbeat(t->db, "hostA:1:relay", NULL, &found, &err),
                     TXO_ENOTFOUND);
    struct txo_process *ps = NULL;
    size_t n = 0;
    assert_int_equal(txo_registry_list(t->db, 15, &ps, &n, &err), TXO_ENOTFOUND);
    assert_null(ps);
    assert_int_equal(txo_registry_unregister(t->db, "hostA:1:relay", &err), TXO_ENOTFOUND);

    /* The thread keeps trying, quietly after its one line, and its stop is clean. */
    struct log_count c = {.registry_lines = 0};
    pthread_mutex_init(&c.mu, NULL);
    txo_log_set_sink(count_registry_lines, &c);
    struct txo_heartbeat_opts ho;
    txo_heartbeat_opts_init(&ho);
    ho.role = "relay";
    ho.version = "1.2.3";
    ho.interval_ms = 20;
    struct txo_heartbeat *hb = NULL;
    assert_int_equal(txo_heartbeat_start(&t->opts, &ho, &hb, &err), 0);
    txo_sleep_ms(400); /* about 20 beats */
    txo_heartbeat_stop(hb);
    txo_log_set_sink(NULL, NULL);
    assert_int_equal(c.registry_lines, 1);
    assert_non_null(strstr(c.last, "txo_processes does not exist"));
    pthread_mutex_destroy(&c.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_heartbeat_list_unregister),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_purge_deletes_only_long_stale_rows),
        cmocka_unit_test(test_heartbeat_thread_registers_beats_and_leaves),
        cmocka_unit_test_setup_teardown(test_missing_table, setup_outbox_only, teardown),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
