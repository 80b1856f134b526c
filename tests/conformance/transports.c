/*
 * The rows of the transport conformance suite (transports.h): one per transport this build
 * has, with its private server from tests/support and its independent reader.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "transports.h"
#include "txo/webhook.h"

#define NAME_CAP 128 /* a stream, topic, queue or group name */

/* ---- read-back normalisation ---- */

/* The headers the contracts read, in HTTP spelling: CloudEvents attributes and the W3C trace
 * context. */
static const char *const header_names[] = {"ce-specversion", "ce-id",       "ce-type",
                                           "ce-source",      "traceparent", "tracestate"};

static void add_message(json_t *all, const char *key, const char *body, json_t *headers)
{
    json_t *m = json_pack("{s:s?, s:s, s:o}", "key", key, "body", body != NULL ? body : "",
                          "headers", headers != NULL ? headers : json_object());
    assert_non_null(m);
    json_array_append_new(all, m);
}

#if TXO_WITH_KAFKA || TXO_WITH_REDIS || TXO_WITH_RABBITMQ
/* A header name spelled the transport's way: "ce-id" is "ce_id" (Kafka, AMQP and Redis
 * bindings); the trace context keeps its own name. */
static const char *underscored(const char *name, char *buf, size_t cap)
{
    if (strncmp(name, "ce-", 3) != 0)
        return name;
    snprintf(buf, cap, "ce_%s", name + 3);
    return buf;
}
#endif

/* A scratch error for the constructors below, reset for each. */
static struct txo_error scratch;

static struct txo_error *fresh_err(void)
{
    txo_error_init(&scratch);
    return &scratch;
}

/* Fails the test when constructor what returned rc < 0 (its reason in the scratch error). */
static void made(int rc, const char *what)
{
    if (rc < 0)
        fail_msg("%s: %s", what, scratch.msg);
}

/* A row's server lifecycle from its test server's start, cleanup, kill and restart. */
#define SERVER_OPS(row, field, support)                                                            \
    static void row##_start(struct env *e)                                                         \
    {                                                                                              \
        support##_start(&e->field);                                                                \
    }                                                                                              \
    static void row##_cleanup(struct env *e)                                                       \
    {                                                                                              \
        support##_cleanup(&e->field);                                                              \
    }                                                                                              \
    static void row##_kill(struct env *e)                                                          \
    {                                                                                              \
        testchild_server_kill(&e->field.srv);                                                      \
    }                                                                                              \
    static void row##_restart(struct env *e)                                                       \
    {                                                                                              \
        testchild_server_restart(&e->field.srv);                                                   \
    }

/* ---- rows ---- */

#if TXO_WITH_NATS
SERVER_OPS(nats, nats, testnats)

/* Stream "NS_<ns>", subjects "<ns>.events.>", durable "<ns>-dur". */
struct nats_cfg {
    struct txo_nats_opts o;
    char stream[NAME_CAP], prefix[NAME_CAP], durable[NAME_CAP];
};

static void nats_cfg(struct env *e, const char *ns, struct nats_cfg *c)
{
    snprintf(c->stream, sizeof(c->stream), "NS_%s", ns);
    snprintf(c->prefix, sizeof(c->prefix), "%s.events", ns);
    snprintf(c->durable, sizeof(c->durable), "%s-dur", ns);
    txo_nats_opts_init(&c->o);
    c->o.url = e->nats.url;
    c->o.connect_timeout_ms = 1000;
    c->o.reconnect_wait_ms = 100;
    c->o.stream = c->stream;
    c->o.subject_prefix = c->prefix;
    c->o.durable = c->durable;
    c->o.ack_wait_ms = 1500;
    c->o.nak_delay_ms = 200;
}

static struct txo_publisher *nats_publisher(struct env *e, const char *ns)
{
    struct nats_cfg c;
    nats_cfg(e, ns, &c);
    struct txo_publisher *pub = NULL;
    made(txo_publisher_nats_new(&c.o, &pub, fresh_err()), "txo_publisher_nats_new");
    return pub;
}

static struct txo_consumer *nats_consumer(struct env *e, const char *ns,
                                          const struct txo_handler *h)
{
    struct nats_cfg c;
    nats_cfg(e, ns, &c);
    struct txo_consumer *cons = NULL;
    made(txo_consumer_nats_new(&c.o, h, &cons, fresh_err()), "txo_consumer_nats_new");
    return cons;
}

static void nats_forget(struct env *e, const char *ns)
{
    struct nats_cfg c;
    nats_cfg(e, ns, &c);
    testnats_delete_consumer(&e->nats, c.stream, c.durable);
}

/* cnats directly: the bodies and ids in stream order, each message's headers by sequence. */
static json_t *nats_read_back(struct env *e, const char *ns)
{
    struct nats_cfg c;
    nats_cfg(e, ns, &c);
    char **ids = NULL, **data = NULL;
    size_t n = testnats_stream_read(&e->nats, c.stream, &ids, &data);
    json_t *all = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *headers = json_object();
        for (size_t k = 0; k < TXO_ARRAY_LEN(header_names); k++) {
            char *v = NULL;
            testnats_stream_msg(&e->nats, c.stream, i + 1, header_names[k], &v, NULL);
            if (v != NULL)
                json_object_set_new(headers, header_names[k], json_string(v));
            free(v);
        }
        add_message(all, ids[i], data[i], headers);
    }
    testnats_free_ids(ids, n);
    testnats_free_ids(data, n);
    return all;
}
#endif

#if TXO_WITH_KAFKA
static void kafka_start(struct env *e)
{
    testkafka_start(&e->kafka);
}

static void kafka_cleanup(struct env *e)
{
    testkafka_stop(&e->kafka);
}

/* The mock cluster cannot die: every broker refuses connections instead. */
static void kafka_kill(struct env *e)
{
    testkafka_set_brokers(&e->kafka, false);
}

static void kafka_restart(struct env *e)
{
    testkafka_set_brokers(&e->kafka, true);
}

/* Topic "<ns>.events.order" (3 partitions), group "<ns>-group", dead letters "<ns>.dead". */
struct kafka_cfg {
    struct txo_kafka_opts o;
    char template[NAME_CAP], topic[NAME_CAP], group[NAME_CAP], dead[NAME_CAP];
};

static void kafka_cfg(struct env *e, const char *ns, struct kafka_cfg *c)
{
    snprintf(c->template, sizeof(c->template), "%s.events.{aggregate_type}", ns);
    snprintf(c->topic, sizeof(c->topic), "%s.events.order", ns);
    snprintf(c->group, sizeof(c->group), "%s-group", ns);
    snprintf(c->dead, sizeof(c->dead), "%s.dead", ns);
    testkafka_opts(&e->kafka, &c->o, c->template);
    c->o.delivery_timeout_ms = 2000;
    c->o.topics = c->topic;
    c->o.group = c->group;
    c->o.retry_delay_ms = 200;
    c->o.dead_letter_topic = c->dead;
}

static void kafka_prepare(struct env *e, const char *ns)
{
    struct kafka_cfg c;
    kafka_cfg(e, ns, &c);
    testkafka_create_topic(&e->kafka, c.topic, 3);
    testkafka_create_topic(&e->kafka, c.dead, 1);
}

static struct txo_publisher *kafka_publisher(struct env *e, const char *ns)
{
    struct kafka_cfg c;
    kafka_cfg(e, ns, &c);
    return testkafka_publisher(&c.o);
}

static struct txo_consumer *kafka_consumer(struct env *e, const char *ns,
                                           const struct txo_handler *h)
{
    struct kafka_cfg c;
    kafka_cfg(e, ns, &c);
    /* A member lost while every broker was down is replaced within seconds, not librdkafka's
     * default 45 s session. */
    const char *props[] = {"session.timeout.ms=6000", "heartbeat.interval.ms=500",
                           "reconnect.backoff.ms=50", "reconnect.backoff.max.ms=500"};
    c.o.properties = props;
    c.o.n_properties = TXO_ARRAY_LEN(props);
    struct txo_consumer *cons = NULL;
    made(txo_consumer_kafka_new(&c.o, h, NULL, &cons, fresh_err()), "txo_consumer_kafka_new");
    return cons;
}

/* kcat: each partition's records in offset order, the headers in the ce_ spelling. */
static json_t *kafka_read_back(struct env *e, const char *ns)
{
    struct kafka_cfg c;
    kafka_cfg(e, ns, &c);
    struct testkafka_record *r = NULL;
    size_t n = testkafka_read(&e->kafka, c.topic, &r);
    json_t *all = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *headers = json_object();
        char buf[64];
        for (size_t k = 0; k < TXO_ARRAY_LEN(header_names); k++) {
            char *v = testkafka_header(&r[i], underscored(header_names[k], buf, sizeof(buf)));
            if (v != NULL)
                json_object_set_new(headers, header_names[k], json_string(v));
            free(v);
        }
        char *key = testkafka_header(&r[i], TXO_KAFKA_HEADER_IDEMPOTENCY_KEY);
        add_message(all, key, r[i].value, headers);
        free(key);
    }
    testkafka_records_free(r, n);
    return all;
}

static long kafka_dead_letters(struct env *e, const char *ns)
{
    struct kafka_cfg c;
    kafka_cfg(e, ns, &c);
    struct testkafka_record *r = NULL;
    size_t n = testkafka_read(&e->kafka, c.dead, &r);
    testkafka_records_free(r, n);
    return (long)n;
}
#endif

#if TXO_WITH_REDIS
SERVER_OPS(redis, redis, testredis)

/* Stream "<ns>.events.order" (and its ".dead"), group "<ns>-group". */
struct redis_cfg {
    struct txo_redis_opts o;
    char template[NAME_CAP], stream[NAME_CAP], group[NAME_CAP], dead[NAME_CAP + 8];
};

static void redis_cfg(struct env *e, const char *ns, struct redis_cfg *c)
{
    snprintf(c->template, sizeof(c->template), "%s.events.{aggregate_type}", ns);
    snprintf(c->stream, sizeof(c->stream), "%s.events.order", ns);
    snprintf(c->group, sizeof(c->group), "%s-group", ns);
    snprintf(c->dead, sizeof(c->dead), "%s.dead", c->stream);
    txo_redis_opts_init(&c->o);
    c->o.url = e->redis.url;
    c->o.connect_timeout_ms = 500;
    c->o.timeout_ms = 1000;
    c->o.stream_template = c->template;
    c->o.stream = c->stream;
    c->o.group = c->group;
    c->o.claim_idle_ms = 300;
}

static struct txo_publisher *redis_publisher(struct env *e, const char *ns)
{
    struct redis_cfg c;
    redis_cfg(e, ns, &c);
    struct txo_publisher *pub = NULL;
    made(txo_publisher_redis_new(&c.o, NULL, &pub, fresh_err()), "txo_publisher_redis_new");
    return pub;
}

static struct txo_consumer *redis_consumer(struct env *e, const char *ns,
                                           const struct txo_handler *h)
{
    struct redis_cfg c;
    redis_cfg(e, ns, &c);
    struct txo_consumer *cons = NULL;
    made(txo_consumer_redis_new(&c.o, h, NULL, &cons, fresh_err()), "txo_consumer_redis_new");
    return cons;
}

/* redis-cli XRANGE: the entries in stream order, the fields in the ce_ spelling. */
static json_t *redis_read_back(struct env *e, const char *ns)
{
    struct redis_cfg c;
    redis_cfg(e, ns, &c);
    json_t *entries = testredis_xrange(&e->redis, c.stream);
    json_t *all = json_array();
    size_t i;
    json_t *entry;
    json_array_foreach(entries, i, entry)
    {
        json_t *headers = json_object();
        char buf[64];
        for (size_t k = 0; k < TXO_ARRAY_LEN(header_names); k++) {
            const char *v = testredis_field(entry, underscored(header_names[k], buf, sizeof(buf)));
            if (v != NULL)
                json_object_set_new(headers, header_names[k], json_string(v));
        }
        const char *body = testredis_field(entry, "envelope");
        add_message(all, testredis_field(entry, "idempotency_key"),
                    body != NULL ? body : testredis_field(entry, "data"), headers);
    }
    json_decref(entries);
    return all;
}

static long redis_dead_letters(struct env *e, const char *ns)
{
    struct redis_cfg c;
    redis_cfg(e, ns, &c);
    return (long)testredis_xlen(&e->redis, c.dead);
}

static void redis_forget(struct env *e, const char *ns)
{
    struct redis_cfg c;
    redis_cfg(e, ns, &c);
    json_decref(testredis_cli(&e->redis,
                              (const char *const[]){"XGROUP", "DESTROY", c.stream, c.group, NULL}));
}
#endif

#if TXO_WITH_RABBITMQ
SERVER_OPS(rabbit, rabbit, testrabbit)

/* Exchange "<ns>.x"; the consumer's queue "<ns>-q" (and its .dlq), pika's queue "<ns>-seen". */
struct rabbit_cfg {
    struct txo_rabbitmq_opts o;
    char exchange[NAME_CAP], queue[NAME_CAP], dlq[NAME_CAP + 8], seen[NAME_CAP];
};

static void rabbit_cfg(struct env *e, const char *ns, struct rabbit_cfg *c)
{
    snprintf(c->exchange, sizeof(c->exchange), "%s.x", ns);
    snprintf(c->queue, sizeof(c->queue), "%s-q", ns);
    snprintf(c->dlq, sizeof(c->dlq), "%s.dlq", c->queue);
    snprintf(c->seen, sizeof(c->seen), "%s-seen", ns);
    txo_rabbitmq_opts_init(&c->o);
    c->o.url = e->rabbit.url;
    c->o.connect_timeout_ms = 1000;
    c->o.exchange = c->exchange;
    c->o.queue = c->queue;
    c->o.binding_key = "#";
    c->o.prefetch = 20;
    c->o.retry_delay_ms = 200;
}

/* pika's own queue, bound to everything the exchange gets: what the server routed. */
static void rabbit_prepare(struct env *e, const char *ns)
{
    struct rabbit_cfg c;
    rabbit_cfg(e, ns, &c);
    free(testrabbit_client(&e->rabbit, "declare", c.seen, c.exchange, "#", NULL));
}

static struct txo_publisher *rabbit_publisher(struct env *e, const char *ns)
{
    struct rabbit_cfg c;
    rabbit_cfg(e, ns, &c);
    struct txo_publisher *pub = NULL;
    made(txo_publisher_rabbitmq_new(&c.o, NULL, &pub, fresh_err()), "txo_publisher_rabbitmq_new");
    return pub;
}

static struct txo_consumer *rabbit_consumer(struct env *e, const char *ns,
                                            const struct txo_handler *h)
{
    struct rabbit_cfg c;
    rabbit_cfg(e, ns, &c);
    struct txo_consumer *cons = NULL;
    made(txo_consumer_rabbitmq_new(&c.o, h, NULL, &cons, fresh_err()), "txo_consumer_rabbitmq_new");
    return cons;
}

/* pika drains the observer queue: message_id, body and the headers in the ce_ spelling. */
static json_t *rabbit_read_back(struct env *e, const char *ns)
{
    struct rabbit_cfg c;
    rabbit_cfg(e, ns, &c);
    char *out = testrabbit_client(&e->rabbit, "drain", c.seen, "1.0", NULL);
    json_t *all = json_array();
    for (char *line = out; *line != '\0';) {
        char *end = strchr(line, '\n');
        if (end != NULL)
            *end = '\0';
        json_t *m = json_loads(line, 0, NULL);
        assert_non_null(m);
        json_t *headers = json_object();
        json_t *amqp = json_object_get(m, "headers");
        char buf[64];
        for (size_t k = 0; k < TXO_ARRAY_LEN(header_names); k++) {
            json_t *v = json_object_get(amqp, underscored(header_names[k], buf, sizeof(buf)));
            if (json_is_string(v))
                json_object_set(headers, header_names[k], v);
        }
        add_message(all, json_string_value(json_object_get(m, "message_id")),
                    json_string_value(json_object_get(m, "body")), headers);
        json_decref(m);
        line = end != NULL ? end + 1 : line + strlen(line);
    }
    free(out);
    return all;
}

static long rabbit_dead_letters(struct env *e, const char *ns)
{
    struct rabbit_cfg c;
    rabbit_cfg(e, ns, &c);
    return testrabbit_count(&e->rabbit, c.dlq);
}

static void rabbit_forget(struct env *e, const char *ns)
{
    struct rabbit_cfg c;
    rabbit_cfg(e, ns, &c);
    free(testrabbit_client(&e->rabbit, "delete", c.queue, NULL));
}

static void rabbit_describe(struct env *e, const char *ns)
{
    struct rabbit_cfg c;
    rabbit_cfg(e, ns, &c);
    char retry[NAME_CAP + 8];
    snprintf(retry, sizeof(retry), "%s.retry", c.queue);
    testrabbit_print_state(&e->rabbit, (const char *const[]){c.seen, c.queue, retry, c.dlq, NULL});
}
#endif

#if TXO_WITH_GRPC
SERVER_OPS(grpc, grpc, testgrpc)

/* One server for every namespace: each contract starts from empty records. */
static void grpc_prepare(struct env *e, const char *ns)
{
    (void)ns;
    testgrpc_reset_records(&e->grpc);
}

static struct txo_publisher *grpc_publisher(struct env *e, const char *ns)
{
    (void)ns;
    struct txo_grpc_opts o;
    txo_grpc_opts_init(&o);
    o.target = e->grpc.target;
    o.deadline_ms = 2000;
    o.reconnect_max_ms = 300;
    struct txo_publisher *pub = NULL;
    made(txo_publisher_grpc_new(&o, NULL, &pub, fresh_err()), "txo_publisher_grpc_new");
    return pub;
}

/* The EventSink server's records; its message carries the payload alone: it is the body. The
 * trace context is a field of each event, empty when it has none. */
static json_t *grpc_read_back(struct env *e, const char *ns)
{
    (void)ns;
    struct testgrpc_event *ev = NULL;
    size_t n = testgrpc_events(&e->grpc, &ev);
    json_t *all = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *headers = json_object();
        if (ev[i].traceparent[0] != '\0')
            json_object_set_new(headers, "traceparent", json_string(ev[i].traceparent));
        if (ev[i].tracestate[0] != '\0')
            json_object_set_new(headers, "tracestate", json_string(ev[i].tracestate));
        add_message(all, ev[i].idempotency_key, (const char *)ev[i].payload, headers);
    }
    testgrpc_free_events(ev, n);
    return all;
}
#endif

static void web_spawn(struct env *e)
{
    const char *py = getenv("TXO_PYTHON");
    char script[512], port[16];
    snprintf(script, sizeof(script), "%s/tests/support/http_recorder.py", TXO_TEST_SOURCE_DIR);
    snprintf(port, sizeof(port), "%u", e->web_port);
    const char *argv[] = {py != NULL && py[0] != '\0' ? py : "/usr/bin/python3", script, port,
                          e->web_file, NULL};
    testproc_start(&e->web, "http_recorder", argv, NULL);
    if (!testproc_wait_port(e->web_port, 10000)) {
        testproc_print_log(&e->web, "http_recorder.py");
        fail_msg("http_recorder.py did not listen on %u", e->web_port);
    }
}

static void web_start(struct env *e)
{
    e->web_port = testproc_free_port();
    snprintf(e->web_file, sizeof(e->web_file), "/tmp/txo_conformance_web_%ld.jsonl",
             (long)getpid());
    unlink(e->web_file);
    web_spawn(e);
}

static void web_cleanup(struct env *e)
{
    testproc_stop_hard(&e->web);
    testproc_remove_log(&e->web);
    unlink(e->web_file);
}

static void web_kill(struct env *e)
{
    testproc_stop_hard(&e->web);
}

static void web_restart(struct env *e)
{
    web_spawn(e);
}

static void web_prepare(struct env *e, const char *ns)
{
    (void)ns;
    unlink(e->web_file);
}

static struct txo_publisher *web_publisher(struct env *e, const char *ns)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/%s", e->web_port, ns);
    struct txo_webhook_opts o;
    txo_webhook_opts_init(&o);
    o.url = url;
    o.connect_timeout_ms = 500;
    o.timeout_ms = 2000;
    struct txo_publisher *pub = NULL;
    made(txo_publisher_webhook_new(&o, &pub, fresh_err()), "txo_publisher_webhook_new");
    return pub;
}

static json_t *web_read_back(struct env *e, const char *ns)
{
    (void)ns;
    json_t *all = json_array();
    FILE *f = fopen(e->web_file, "r");
    if (f == NULL)
        return all; /* nothing was posted */
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *m = json_loads(line, 0, NULL);
        assert_non_null(m);
        json_t *http = json_object_get(m, "headers");
        json_t *headers = json_object();
        for (size_t k = 0; k < TXO_ARRAY_LEN(header_names); k++) {
            json_t *v = json_object_get(http, header_names[k]);
            if (json_is_string(v))
                json_object_set(headers, header_names[k], v);
        }
        add_message(all, json_string_value(json_object_get(http, "idempotency-key")),
                    json_string_value(json_object_get(m, "body")), headers);
        json_decref(m);
    }
    free(line);
    fclose(f);
    return all;
}

const struct row transport_rows[] = {
#if TXO_WITH_NATS
    {.name = "nats",
     .contracts = C_PUBLISH | C_CLOUDEVENTS | C_CONSUME | C_RESTART | C_TRACE | C_FORGET,
     .start = nats_start,
     .cleanup = nats_cleanup,
     .kill = nats_kill,
     .restart = nats_restart,
     .publisher = nats_publisher,
     .consumer = nats_consumer,
     .read_back = nats_read_back,
     .forget = nats_forget,
     .shutdown = txo_nats_shutdown, /* TERM keeps no dead letter */
     /* nats-server 2.9 (fixed in the 2.10 series): a redelivery that fails to reach an expired
      * pull request makes the consumer hand out its last message again, with the same delivery
      * count, and the failed redelivery comes back only after ack_wait. */
     .repeats_deliveries = true},
#endif
#if TXO_WITH_KAFKA
    {.name = "kafka",
     .contracts = C_PUBLISH | C_CLOUDEVENTS | C_CONSUME | C_RESTART | C_TRACE,
     .start = kafka_start,
     .cleanup = kafka_cleanup,
     .kill = kafka_kill,
     .restart = kafka_restart,
     .prepare = kafka_prepare,
     .publisher = kafka_publisher,
     .consumer = kafka_consumer,
     .read_back = kafka_read_back,
     .dead_letters = kafka_dead_letters},
#endif
#if TXO_WITH_REDIS
    {.name = "redis",
     .contracts = C_PUBLISH | C_CLOUDEVENTS | C_CONSUME | C_RESTART | C_TRACE | C_FORGET,
     .start = redis_start,
     .cleanup = redis_cleanup,
     .kill = redis_kill,
     .restart = redis_restart,
     .publisher = redis_publisher,
     .consumer = redis_consumer,
     .read_back = redis_read_back,
     .dead_letters = redis_dead_letters,
     .forget = redis_forget},
#endif
#if TXO_WITH_RABBITMQ
    {.name = "rabbitmq",
     .contracts = C_PUBLISH | C_CLOUDEVENTS | C_CONSUME | C_RESTART | C_TRACE | C_FORGET,
     .start = rabbit_start,
     .cleanup = rabbit_cleanup,
     .kill = rabbit_kill,
     .restart = rabbit_restart,
     .prepare = rabbit_prepare,
     .publisher = rabbit_publisher,
     .consumer = rabbit_consumer,
     .read_back = rabbit_read_back,
     .dead_letters = rabbit_dead_letters,
     .describe = rabbit_describe,
     .forget = rabbit_forget},
#endif
#if TXO_WITH_GRPC
    /* The EventSink service is the consumer; its message has no CloudEvents form, and the
     * trace context is a field of it. */
    {.name = "grpc",
     .contracts = C_PUBLISH | C_RESTART | C_TRACE,
     .start = grpc_start,
     .cleanup = grpc_cleanup,
     .kill = grpc_kill,
     .restart = grpc_restart,
     .prepare = grpc_prepare,
     .publisher = grpc_publisher,
     .read_back = grpc_read_back},
#endif
    /* The receiving endpoint is the consumer. */
    {.name = "webhook",
     .contracts = C_PUBLISH | C_CLOUDEVENTS | C_RESTART | C_TRACE,
     .start = web_start,
     .cleanup = web_cleanup,
     .kill = web_kill,
     .restart = web_restart,
     .prepare = web_prepare,
     .publisher = web_publisher,
     .read_back = web_read_back},
};

const size_t transport_n_rows = TXO_ARRAY_LEN(transport_rows);
