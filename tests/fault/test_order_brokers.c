/*
 * Per-aggregate order through every broker, seen from outside. For NATS JetStream, Redis
 * Streams, RabbitMQ and Kafka in turn: two writer threads append 3,000 events over 40
 * aggregates (multi-row appends of mixed aggregates, so ids are not always commit order) for
 * about six seconds, while `txo relay` processes with the default ordering drain them:
 *   - relay A dies at its named crash point relay.after_publish (published, not marked);
 *   - relay D joins after a second; the broker is stopped and started again (Kafka, an
 *     in-process cluster: its brokers go down and up) after two; relay B is SIGKILLed at a random
 * moment; relay C stops cleanly (its shards handed over) after five. Then a client that is not txo
 * reads what reached the broker (cnats, redis-cli, pika, kcat) and finds, per aggregate, the first
 * copy of each event in sequence order, each following the one before it (prev_sequence: no gap),
 * and every event there. A later copy of an earlier event (a batch republished after a relay died)
 * is a duplicate for the inbox, not an inversion: counted, printed.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "testdb.h"
#include "testkafka.h"
#include "testnats.h"
#include "testproc.h"
#include "testrabbit.h"
#include "testredis.h"

#define N_AGGS    40
#define PER_TX    10 /* events per append, of different aggregates */
#define WAVES     150
#define N_WRITERS 2
#define N_EVENTS  (N_WRITERS * WAVES * PER_TX)
#define WAVE_MS   40
#define PREFIX    "ord"
#define DRAIN_MS  120000

enum broker { NATS, REDIS, RABBITMQ, KAFKA };
static const char *const broker_names[] = {"nats", "redis", "rabbitmq", "kafka"};

struct ctx {
    enum broker broker;
    struct testdb t;
    struct testnats nats;
    struct testredis redis;
    struct testrabbit rabbit;
    struct testkafka kafka;
    char flags[6][300]; /* the relay's broker flags */
    size_t n_flags;
    struct testproc relay[4]; /* A, B, C, D; pid 0 when not running */
    bool broker_up;
};

/* ---- the writers ---- */

struct writer {
    struct ctx *c;
    unsigned id;
    int rc;
    char msg[TXO_ERROR_MSG_MAX];
};

struct wave {
    unsigned writer, wave;
};

static int append_wave(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    const struct wave *w = arg;
    struct txo_outbox_event ev[PER_TX];
    char agg[PER_TX][16], key[PER_TX][48];
    for (unsigned k = 0; k < PER_TX; k++) {
        /* A different rotation per writer and wave: the two writers meet on aggregates. */
        unsigned a = (w->wave * 7 + k * 3 + w->writer * 11) % N_AGGS;
        snprintf(agg[k], sizeof(agg[k]), "%u", a);
        snprintf(key[k], sizeof(key[k]), "w%u:%u:%u", w->writer, w->wave, k);
        ev[k] = (struct txo_outbox_event){.aggregate_type = "order",
                                          .aggregate_id = agg[k],
                                          .event_type = "OrderChanged",
                                          .payload_json = "{}",
                                          .idempotency_key = key[k]};
    }
    return txo_outbox_append_many(tx, ev, PER_TX, err);
}

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    struct txo_db *db = testdb_connect(&w->c->t);
    struct txo_error err;
    txo_error_init(&err);
    for (unsigned i = 0; i < WAVES && w->rc == 0; i++) {
        struct wave wv = {w->id, i};
        w->rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, append_wave, &wv, &err);
        txo_sleep_ms(WAVE_MS);
    }
    snprintf(w->msg, sizeof(w->msg), "%s", err.msg);
    txo_db_close(db);
    return NULL;
}

/* ---- the brokers ---- */

/* Adds "--name=value" to the relay's broker flags. */
static void flag(struct ctx *c, const char *name, const char *value)
{
    assert_true(c->n_flags < TXO_ARRAY_LEN(c->flags));
    snprintf(c->flags[c->n_flags++], sizeof(c->flags[0]), "--%s=%s", name, value);
}

static void broker_start(struct ctx *c)
{
    switch (c->broker) {
    case NATS:
        testnats_start(&c->nats);
        flag(c, "nats-url", c->nats.url);
        flag(c, "nats-stream", "ORDERS");
        flag(c, "nats-subject-prefix", PREFIX);
        break;
    case REDIS:
        testredis_start(&c->redis);
        flag(c, "redis-url", c->redis.url);
        flag(c, "redis-stream-template", PREFIX ".{aggregate_type}");
        break;
    case RABBITMQ: {
        testrabbit_start(&c->rabbit);
        char *o = testrabbit_client(&c->rabbit, "declare", "order.audit", PREFIX, "#", NULL);
        free(o);
        flag(c, "rabbitmq-url", c->rabbit.url);
        flag(c, "rabbitmq-exchange", PREFIX);
        flag(c, "rabbitmq-queue", "order.worker");
        break;
    }
    case KAFKA:
        testkafka_start(&c->kafka);
        testkafka_create_topic(&c->kafka, PREFIX ".order", 4);
        flag(c, "kafka-brokers", c->kafka.bootstraps);
        flag(c, "kafka-topic-template", PREFIX ".{aggregate_type}");
        /* Back within a second of the cluster's return, not librdkafka's 10 s backoff. */
        flag(c, "kafka-property", "reconnect.backoff.max.ms=500");
        break;
    }
}

/* The broker goes away and comes back (what it had acknowledged kept). */
static void broker_bounce(struct ctx *c)
{
    switch (c->broker) {
    case NATS:
        testchild_server_stop(&c->nats.srv);
        testchild_server_restart(&c->nats.srv);
        break;
    case REDIS:
        testchild_server_stop(&c->redis.srv);
        testchild_server_restart(&c->redis.srv);
        break;
    case RABBITMQ:
        testchild_server_stop(&c->rabbit.srv);
        testchild_server_restart(&c->rabbit.srv);
        break;
    case KAFKA:
        testkafka_set_brokers(&c->kafka, false);
        txo_sleep_ms(1500);
        testkafka_set_brokers(&c->kafka, true);
        break;
    }
}

static void broker_stop(struct ctx *c)
{
    switch (c->broker) {
    case NATS:
        testnats_cleanup(&c->nats);
        break;
    case REDIS:
        testredis_cleanup(&c->redis);
        break;
    case RABBITMQ:
        testrabbit_cleanup(&c->rabbit);
        break;
    case KAFKA:
        testkafka_stop(&c->kafka);
        break;
    }
}

static int cmp_record(const void *x, const void *y)
{
    const struct testkafka_record *a = x, *b = y;
    if (a->partition != b->partition)
        return a->partition < b->partition ? -1 : 1;
    return (a->offset > b->offset) - (a->offset < b->offset);
}

/* The envelopes that reached the broker, in its order (per partition for Kafka, which keeps
 * an aggregate on one partition), read by a client that is not txo. */
static json_t *broker_read(struct ctx *c)
{
    json_t *out = json_array();
    switch (c->broker) {
    case NATS: {
        char **ids = NULL, **data = NULL;
        size_t n = testnats_stream_read(&c->nats, "ORDERS", &ids, &data);
        for (size_t i = 0; i < n; i++)
            json_array_append_new(out, json_string(data[i]));
        testnats_free_ids(ids, n);
        testnats_free_ids(data, n);
        break;
    }
    case REDIS: {
        json_t *entries = testredis_xrange(&c->redis, PREFIX ".order");
        for (size_t i = 0; i < json_array_size(entries); i++)
            json_array_append_new(
                out, json_string(testredis_field(json_array_get(entries, i), "envelope")));
        json_decref(entries);
        break;
    }
    case RABBITMQ: {
        char *lines = testrabbit_client(&c->rabbit, "drain", "order.audit", "1.5", NULL);
        for (char *save = NULL, *l = strtok_r(lines, "\n", &save); l != NULL;
             l = strtok_r(NULL, "\n", &save)) {
            json_t *m = json_loads(l, 0, NULL);
            assert_non_null(m);
            json_array_append(out, json_object_get(m, "body"));
            json_decref(m);
        }
        free(lines);
        break;
    }
    case KAFKA: {
        struct testkafka_record *r = NULL;
        size_t n = testkafka_read(&c->kafka, PREFIX ".order", &r);
        qsort(r, n, sizeof(*r), cmp_record);
        for (size_t i = 0; i < n; i++)
            json_array_append_new(out, json_string(r[i].value));
        testkafka_records_free(r, n);
        break;
    }
    }
    return out;
}

/* ---- the relays ---- */

enum { RELAY_A, RELAY_B, RELAY_C, RELAY_D, N_RELAYS };
_Static_assert(N_RELAYS == sizeof(((struct ctx *)0)->relay) / sizeof(struct testproc),
               "one testproc per relay");

static void relay_start(struct ctx *c, struct testproc *p, const char *tag, bool crash)
{
    const char *argv[24] = {testproc_txo_bin(), "relay", "--publisher",   broker_names[c->broker],
                            "--batch-size",     "50",    "--shard-lease", "1500",
                            "--idle-sleep",     "20",    "--log-level",   "info"};
    size_t n = 12;
    for (size_t i = 0; i < c->n_flags; i++)
        argv[n++] = c->flags[i];
    argv[n] = NULL;
    const char *crash_env[] = {"TXO_CRASH_POINT=relay.after_publish", NULL};
    testproc_start(p, tag, argv, crash ? crash_env : NULL);
}

/* Waits until relay p logged that it took shards (the crash relay must own some before the
 * others join, or they may publish everything before it gets any). */
static void wait_for_shards(struct testproc *p, const char *what)
{
    int64_t deadline = txo_monotonic_ms() + 15000;
    while (txo_monotonic_ms() < deadline) {
        char *log = testproc_log(p);
        bool took = false;
        for (const char *at = log; at != NULL && !took && (at = strstr(at, " taken=")) != NULL;
             at += 7)
            took = at[7] >= '1' && at[7] <= '9';
        free(log);
        if (took)
            return;
        txo_sleep_ms(20);
    }
    testproc_print_log(p, what);
    fail_msg("%s took no shards within 15 s", what);
}

static int64_t published(struct ctx *c)
{
    return testdb_i64(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'",
                      NULL, 0);
}

/* ---- the check ---- */

struct agg_state {
    uint64_t last;
};

static void check_order(struct ctx *c, json_t *bodies)
{
    struct agg_state agg[N_AGGS] = {{0}};
    unsigned char *seen = txo_calloc(N_EVENTS, 1);
    assert_non_null(seen);
    size_t repeats = 0, first = 0;
    for (size_t i = 0; i < json_array_size(bodies); i++) {
        const char *text = json_string_value(json_array_get(bodies, i));
        json_t *env = text != NULL ? json_loads(text, 0, NULL) : NULL;
        if (env == NULL)
            fail_msg("%s: message %zu is not an envelope: %s", broker_names[c->broker], i,
                     text != NULL ? text : "(none)");
        const char *key = json_string_value(json_object_get(env, "idempotency_key"));
        unsigned w = 0, wave = 0, k = 0;
        if (key == NULL || sscanf(key, "w%u:%u:%u", &w, &wave, &k) != 3 || w >= N_WRITERS ||
            wave >= WAVES || k >= PER_TX)
            fail_msg("%s: unexpected key %s", broker_names[c->broker], key ? key : "(none)");
        size_t idx = ((size_t)w * WAVES + wave) * PER_TX + k;
        long a = strtol(json_string_value(json_object_get(env, "aggregate_id")), NULL, 10);
        uint64_t seq = (uint64_t)json_integer_value(json_object_get(env, "sequence"));
        uint64_t prev = (uint64_t)json_integer_value(json_object_get(env, "prev_sequence"));
        json_decref(env);
        assert_true(a >= 0 && a < N_AGGS);
        if (seen[idx]++) {
            repeats++;
            continue;
        }
        first++;
        if (seq <= agg[a].last || prev != agg[a].last)
            fail_msg("%s: aggregate %ld: %s (sequence %llu after %llu) came when the last "
                     "first copy was sequence %llu (message %zu)",
                     broker_names[c->broker], a, key, (unsigned long long)seq,
                     (unsigned long long)prev, (unsigned long long)agg[a].last, i + 1);
        agg[a].last = seq;
    }
    for (size_t i = 0; i < N_EVENTS; i++)
        if (!seen[i])
            fail_msg("%s: event %zu of %d never reached the broker", broker_names[c->broker], i,
                     N_EVENTS);
    print_message("%s: %zu events in order per aggregate, no gap (%zu later copies)\n",
                  broker_names[c->broker], first, repeats);
    txo_free(seen);
}

/* ---- the test ---- */

static int setup(void **state)
{
    struct ctx *c = txo_calloc(1, sizeof(*c));
    assert_non_null(c);
    c->broker = *(const enum broker *)*state;
    testdb_setup(&c->t, broker_names[c->broker]);
    testdb_export_env(&c->t);
    broker_start(c);
    c->broker_up = true;
    *state = c;
    return 0;
}

/* Also after a failed assertion: no relay, broker or database outlives its test. */
static int teardown(void **state)
{
    struct ctx *c = *state;
    for (size_t i = 0; i < N_RELAYS; i++) {
        testproc_stop_hard(&c->relay[i]);
        if (c->relay[i].log_path[0] != '\0')
            testproc_remove_log(&c->relay[i]);
    }
    if (c->broker_up)
        broker_stop(c);
    testdb_teardown(&c->t);
    txo_free(c);
    return 0;
}

static void test_order(void **state)
{
    struct ctx *c = *state;
    const char *name = broker_names[c->broker];
    struct testproc *relay = c->relay;
    relay_start(c, &relay[RELAY_A], "order-a", true);
    wait_for_shards(&relay[RELAY_A], "relay A");
    relay_start(c, &relay[RELAY_B], "order-b", false);
    relay_start(c, &relay[RELAY_C], "order-c", false);
    struct writer w[N_WRITERS];
    pthread_t th[N_WRITERS];
    for (unsigned i = 0; i < N_WRITERS; i++) {
        w[i] = (struct writer){.c = c, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
    }
    txo_sleep_ms(1000);
    relay_start(c, &relay[RELAY_D], "order-d", false);
    txo_sleep_ms(1000);
    broker_bounce(c);
    txo_sleep_ms((unsigned)(200 + rand() % 1500));
    testproc_signal(&relay[RELAY_B], SIGKILL);
    txo_sleep_ms(1000);
    bool c_stopped = testproc_stop(&relay[RELAY_C], 20000);
    for (unsigned i = 0; i < N_WRITERS; i++)
        pthread_join(th[i], NULL);
    if (!c_stopped) {
        testproc_print_log(&relay[RELAY_C], "relay C");
        fail_msg("relay C did not stop cleanly");
    }
    for (unsigned i = 0; i < N_WRITERS; i++)
        if (w[i].rc != 0)
            fail_msg("writer %u: %s", i, w[i].msg);
    int64_t deadline = txo_monotonic_ms() + DRAIN_MS;
    while (published(c) < N_EVENTS && txo_monotonic_ms() < deadline)
        txo_sleep_ms(200);
    if (published(c) < N_EVENTS) {
        testproc_print_log(&relay[RELAY_D], "relay D");
        fail_msg("%s: %lld of %d events PUBLISHED after %d s", name, (long long)published(c),
                 N_EVENTS, DRAIN_MS / 1000);
    }
    if (!testproc_wait(&relay[RELAY_A], 1000) || !testproc_killed(&relay[RELAY_A])) {
        testproc_print_log(&relay[RELAY_A], "relay A");
        fail_msg("relay A did not die at its crash point");
    }
    if (!testproc_stop(&relay[RELAY_D], 20000))
        fail_msg("relay D did not stop cleanly");

    json_t *bodies = broker_read(c);
    check_order(c, bodies);
    json_decref(bodies);
}

static enum broker nats = NATS, redis = REDIS, rabbitmq = RABBITMQ, kafka = KAFKA;

int main(void)
{
    srand((unsigned)txo_monotonic_ms());
    const struct CMUnitTest tests[] = {
        {"order_through_nats", test_order, setup, teardown, &nats},
        {"order_through_redis", test_order, setup, teardown, &redis},
        {"order_through_rabbitmq", test_order, setup, teardown, &rabbitmq},
        {"order_through_kafka", test_order, setup, teardown, &kafka},
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
