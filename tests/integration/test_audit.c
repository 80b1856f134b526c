/*
 * The order service's audit (orders_audit, `txo audit`) against a real MariaDB: silent on a
 * healthy database, and each kind of corruption an operator must hear about is reported with
 * its order, while the others stay silent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "order_saga.h"
#include "orders.h"
#include "testdb.h"
#include "testorders.h"

#define MAX_SEEN 32

struct seen {
    char checks[MAX_SEEN][32];
    int64_t orders[MAX_SEEN];
    size_t n;
};

static void record(void *arg, const char *check, int64_t order_id, const char *detail)
{
    struct seen *s = arg;
    print_message("  violation %s order=%lld %s\n", check, (long long)order_id, detail);
    if (s->n < MAX_SEEN) {
        snprintf(s->checks[s->n], sizeof(s->checks[s->n]), "%s", check);
        s->orders[s->n] = order_id;
        s->n++;
    }
}

static bool saw(const struct seen *s, const char *check, int64_t order_id)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->checks[i], check) == 0 && (order_id < 0 || s->orders[i] == order_id))
            return true;
    return false;
}

/* Each test sells from 10 of iphone-15. */
static void stock(struct testdb *t)
{
    testorders_stock(t->db, "iphone-15", 10);
}

/* An order of one iPhone created with its saga, which nothing runs yet; returns its id. */
static int64_t created(struct testdb *t, char saga[TXO_SAGA_ID_LEN])
{
    struct order_item item = {.sku = "iphone-15", .qty = 1, .price_cents = 100};
    struct txo_error err;
    txo_error_init(&err);
    int64_t id = 0;
    assert_int_equal(orders_create_with_saga(t->db, 7, &item, 1, &id, saga, &err), 0);
    return id;
}

/* An order run to its end by the saga; returns its id. faults may be NULL. */
static int64_t order(struct testdb *t, const struct order_faults *faults, enum txo_saga_status want)
{
    char saga[TXO_SAGA_ID_LEN];
    int64_t id = created(t, saga);
    struct txo_error err;
    txo_error_init(&err);
    enum txo_saga_status final;
    assert_int_equal(orders_run_saga(t->db, saga, faults, NULL, &final, &err), 0);
    assert_int_equal(final, want);
    return id;
}

static struct orders_audit_report audit(struct testdb *t, struct seen *s)
{
    struct orders_audit_opts o;
    orders_audit_opts_init(&o);
    o.settle_s = 1;
    o.report = record;
    o.report_arg = s;
    /* Every row looks settled: backdate the orders and the sagas. */
    testdb_exec(t->db, "UPDATE orders SET created_at = NOW(6) - INTERVAL 5 SECOND");
    testdb_exec(t->db, "UPDATE saga_instances SET updated_at = NOW(6) - INTERVAL 5 SECOND");
    struct orders_audit_report rep;
    struct txo_error err;
    txo_error_init(&err);
    if (orders_audit(t->db, &o, &rep, &err) != 0)
        fail_msg("orders_audit: %s", err.msg);
    return rep;
}

static void exec_id(struct testdb *t, const char *sql, int64_t id)
{
    struct txo_param p[] = {txo_p_i64(id)};
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_exec(t->db, sql, p, 1, NULL, &err) != 0)
        fail_msg("%s: %s", sql, err.msg);
}

/* Runs `txo audit --settle 1` against the test database; its exit status. */
static int txo_audit(struct testdb *t)
{
    testdb_export_env(t);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "'%s' audit --settle 1 --log-level error >/dev/null",
             getenv("TXO_BIN"));
    int status = system(cmd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_healthy_database_is_silent(void **state)
{
    struct testdb *t = *state;
    order(t, NULL, TXO_SAGA_COMPLETED);
    struct order_faults declined = {.decline_payment = true};
    order(t, &declined, TXO_SAGA_COMPENSATED);
    struct seen s = {.n = 0};
    struct orders_audit_report rep = audit(t, &s);
    assert_int_equal(rep.orders, 2);
    assert_int_equal(rep.violations, 0);
    assert_int_equal(txo_audit(t), 0);
}

static void test_each_corruption_is_reported(void **state)
{
    struct testdb *t = *state;
    int64_t ok = order(t, NULL, TXO_SAGA_COMPLETED);
    int64_t lost_event = order(t, NULL, TXO_SAGA_COMPLETED);
    int64_t double_charge = order(t, NULL, TXO_SAGA_COMPLETED);
    struct order_faults declined = {.decline_payment = true};
    int64_t kept_charge = order(t, &declined, TXO_SAGA_COMPENSATED);
    exec_id(t, "DELETE FROM outbox_events WHERE aggregate_id = ? AND event_type = 'OrderCreated'",
            lost_event);
    exec_id(t, "UPDATE shipments SET status = 'CANCELLED' WHERE order_id = ?", double_charge);
    exec_id(t, "INSERT INTO payments (order_id, amount_cents, status) VALUES (?, 100, 'CHARGED')",
            kept_charge);
    testdb_exec(t->db, "UPDATE inventory SET reserved = reserved + 1, available = available - 1");
    /* A saga nobody runs: RUNNING, lease expired long ago. */
    char saga[TXO_SAGA_ID_LEN];
    (void)created(t, saga);
    testdb_exec(t->db, "UPDATE saga_instances SET owner = 'dead-worker', "
                       "lease_until = NOW(6) - INTERVAL 1 HOUR WHERE status = 'RUNNING'");

    struct seen s = {.n = 0};
    struct orders_audit_report rep = audit(t, &s);
    assert_int_equal(rep.orders, 5);
    assert_true(saw(&s, "order_created_event", lost_event));
    assert_true(saw(&s, "confirmed_effects", double_charge));
    assert_true(saw(&s, "cancelled_effects", kept_charge));
    assert_true(saw(&s, "stock", -1));
    assert_true(saw(&s, "stuck_saga", -1));
    for (size_t i = 0; i < s.n; i++)
        assert_true(s.orders[i] != ok); /* the healthy order stays silent */
    assert_int_equal(txo_audit(t), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_healthy_database_is_silent),
        cmocka_unit_test(test_each_corruption_is_reported),
    };
    return testdb_run_each(tests, TXO_ARRAY_LEN(tests), "audit", 0, stock);
}
