/*
 * The order service end to end through each broker, as `make run BROKER=X` runs it: the
 * broker started privately by scripts/broker.sh (the same starter as make run and the
 * benchmarks), `txo up --broker X` with the flags it printed, 200 orders through the HTTP API,
 * every one CONFIRMED, every outbox event PUBLISHED, and every invariant of the pipeline
 * (testpipeline_check_invariants) afterwards; then `txo up` must stop cleanly on SIGTERM.
 * One test per broker with a consuming side.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testrun.h"
#include "testdb.h"
#include "testpipeline.h"
#include "testproc.h"
#include "testserver.h"

#define ORDERS 200

struct ctx {
    struct testdb t;
    struct testpipeline p;
    char dir[64]; /* the broker's data directory */
    const char *broker;
    bool started;
};

static int setup(void **state)
{
    struct ctx *c = testdb_fixture_new(sizeof(*c), "up_brokers", TESTDB_NEW_EXPORT_ENV);
    testpipeline_init(&c->p, c->t.db);
    snprintf(c->dir, sizeof(c->dir), "/tmp/txo_test_broker_XXXXXX");
    assert_non_null(mkdtemp(c->dir));
    *state = c;
    return 0;
}

/* scripts/broker.sh CMD NAME DIR; its stdout into out (may be NULL). */
static int broker_sh(const struct ctx *c, const char *cmd, char *out, size_t size)
{
    char line[512];
    snprintf(line, sizeof(line), "%s %s %s %s 2>>%s/broker.log",
             testserver_source_path("scripts/broker.sh"), cmd, c->broker, c->dir, c->dir);
    FILE *f = popen(line, "r");
    if (f == NULL)
        return -1;
    size_t got = 0;
    if (out != NULL) {
        while (got + 1 < size && fgets(out + got, (int)(size - got), f) != NULL)
            got = strlen(out);
        out[got] = '\0';
    } else {
        while (fgets(line, sizeof(line), f) != NULL)
            ;
    }
    int status = pclose(f);
    return status == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    testpipeline_release(&c->p);
    if (c->started)
        (void)broker_sh(c, "stop", NULL, 0);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", c->dir);
    if (system(cmd) != 0)
        print_message("could not remove %s\n", c->dir);
    testdb_fixture_free(c);
    return 0;
}

static void order_pipeline_through(struct ctx *c, const char *broker)
{
    c->broker = broker;
    static const struct testpipeline_stock stock[] = {{"pen", 10000}, {"book", 10000}};
    testpipeline_set_initial_stock(&c->p, stock, TXO_ARRAY_LEN(stock));
    char flags[1024];
    if (broker_sh(c, "start", flags, sizeof(flags)) != 0) {
        char log[256];
        snprintf(log, sizeof(log), "tail -30 %s/broker.log %s/server.log 1>&2", c->dir, c->dir);
        if (system(log) != 0)
            print_message("no broker log in %s\n", c->dir);
        fail_msg("scripts/broker.sh start %s failed", broker);
    }
    c->started = true;

    unsigned port = testproc_free_port();
    struct testpipeline_args a;
    testpipeline_args_init(&a, "up");
    testpipeline_args_addf(&a, "--listen=127.0.0.1:%u", port);
    testpipeline_args_addf(&a, "--broker=%s", broker);
    for (char *save = NULL, *f = strtok_r(flags, "\n", &save); f != NULL;
         f = strtok_r(NULL, "\n", &save))
        testpipeline_args_addf(&a, "%s", f);
    struct testproc *up = testpipeline_start(&c->p, "up_broker", &a);
    testpipeline_wait_ready(&c->p, up, port);
    int64_t t0 = txo_monotonic_ms();
    testpipeline_place_orders(&c->p, port, broker, ORDERS, true);
    testpipeline_wait_terminal(&c->p, ORDERS, 60000, "through the broker");
    testpipeline_wait_published(&c->p, 30000);
    print_message("%s: %d orders CONFIRMED %lld ms after the first POST\n", broker, ORDERS,
                  (long long)(txo_monotonic_ms() - t0));
    testpipeline_stop_clean(&c->p, up);
    assert_int_equal(
        testdb_i64(c->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'", NULL, 0),
        ORDERS);
    testpipeline_check_invariants(&c->p, stock, TXO_ARRAY_LEN(stock));
    testpipeline_remove_logs(&c->p);
}

static void test_up_through_nats(void **state)
{
    order_pipeline_through(*state, "nats");
}

static void test_up_through_rabbitmq(void **state)
{
    order_pipeline_through(*state, "rabbitmq");
}

static void test_up_through_redis(void **state)
{
    order_pipeline_through(*state, "redis");
}

static void test_up_through_kafka(void **state)
{
    order_pipeline_through(*state, "kafka");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_up_through_nats),
        cmocka_unit_test(test_up_through_rabbitmq),
        cmocka_unit_test(test_up_through_redis),
        cmocka_unit_test(test_up_through_kafka),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
