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
#if TXO_WITH_NATS
#include "txo/nats.h"
#endif
#if TXO_WITH_KAFKA
#include "txo/kafka.h"
#endif
#if TXO_WITH_REDIS
#include "txo/redis.h"
#endif
#if TXO_WITH_RABBITMQ
#include "txo/rabbitmq.h"
#endif
#if TXO_WITH_GRPC
#include "txo/grpc.h"
#endif

#define NAME_MAX_ 128

/* ---- read-back normalisation ---- */

/* The CloudEvents attributes the contracts read, in HTTP spelling. */
static const char *const ce_names[] = {"ce-specversion", "ce-id", "ce-type", "ce-source"};

static void add_message(json_t *all, const char *key, const char *body, json_t *headers)
{
    json_t *m = json_pack("{s:s?, s:s, s:o}", "key", key, "body", body != NULL ? body : "",
                          "headers", headers != NULL ? headers : json_object());
    assert_non_null(m);
    json_array_append_new(all, m);
}

/* "ce-id" spelled the transport's way: "ce_id" (Kafka, AMQP and Redis bindings). */
static const char *underscored(const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "ce_%s", name + 3);
    return buf;
}

/* ---- rows ---- */

#if TXO_WITH_NATS
static void nats_start(struct env *e)
{
    testnats_start(&e->nats);
}

static void nats_cleanup(struct env *e)
{
    testnats_cleanup(&e->nats);
}

static void nats_kill(struct env *e)
{
    testnats_kill(&e->nats);
}

static void nats_restart(struct env *e)
{
    testnats_restart(&e->nats);
}

/* Stream "NS_<ns>", subjects "<ns>.events.>", durable "<ns>-dur". */
static void nats_opts(struct env *e, const char *ns, struct txo_nats_opts *o, char *stream,
                      char *prefix, char *durable)
{
    snprintf(stream, NAME_MAX_, "NS_%s", ns);
    snprintf(prefix, NAME_MAX_, "%s.events", ns);
    snprintf(durable, NAME_MAX_, "%s-dur", ns);
    txo_nats_opts_init(o);
    o->url = e->nats.url;
    o->connect_timeout_ms = 1000;
    o->reconnect_wait_ms = 100;
    o->stream = stream;
    o->subject_prefix = prefix;
    o->durable = durable;
    o->ack_wait_ms = 1500;
    o->nak_delay_ms = 200;
}

static struct txo_publisher *nats_publisher(struct env *e, const char *ns)
{
    char stream[NAME_MAX_], prefix[NAME_MAX_], durable[NAME_MAX_];
    struct txo_nats_opts o;
    nats_opts(e, ns, &o, stream, prefix, durable);
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_nats_new(&o, &pub, &err) < 0)
        fail_msg("txo_publisher_nats_new: %s", err.msg);
    return pub;
}

static struct txo_consumer *nats_consumer(struct env *e, const char *ns,
                                          const struct txo_handler *h)
{
    char stream[NAME_MAX_], prefix[NAME_MAX_], durable[NAME_MAX_];
    struct txo_nats_opts o;
    nats_opts(e, ns, &o, stream, prefix, durable);
    struct txo_consumer *c = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_nats_new(&o, h, &c, &err) < 0)
        fail_msg("txo_consumer_nats_new: %s", err.msg);
    return c;
}

static json_t *nats_read_back(struct env *e, const char *ns)
{
    char stream[NAME_MAX_];
    snprintf(stream, sizeof(stream), "NS_%s", ns);
    char **ids = NULL, **data = NULL;
    size_t n = testnats_stream_read(&e->nats, stream, &ids, &data);
    json_t *all = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *headers = json_object();
        for (size_t k = 0; k < TXO_ARRAY_LEN(ce_names); k++) {
            char *v = NULL;
            testnats_stream_msg(&e->nats, stream, i + 1, ce_names[k], &v, NULL);
            if (v != NULL)
                json_object_set_new(headers, ce_names[k], json_string(v));
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

static void kafka_kill(struct env *e)
{
    testkafka_set_brokers(&e->kafka, false);
}

static void kafka_restart(struct env *e)
{
    testkafka_set_brokers(&e->kafka, true);
}

/* Topic "<ns>.events.order" (3 partitions), group "<ns>-group", dead letters "<ns>.dead". */
static void kafka_names(const char *ns, char *template, char *topic, char *group, char *dead)
{
    snprintf(template, NAME_MAX_, "%s.events.{aggregate_type}", ns);
    snprintf(topic, NAME_MAX_, "%s.events.order", ns);
    snprintf(group, NAME_MAX_, "%s-group", ns);
    snprintf(dead, NAME_MAX_, "%s.dead", ns);
}

static void kafka_prepare(struct env *e, const char *ns)
{
    char template[NAME_MAX_], topic[NAME_MAX_], group[NAME_MAX_], dead[NAME_MAX_];
    kafka_names(ns, template, topic, group, dead);
    testkafka_create_topic(&e->kafka, topic, 3);
    testkafka_create_topic(&e->kafka, dead, 1);
}

static struct txo_publisher *kafka_publisher(struct env *e, const char *ns)
{
    char template[NAME_MAX_], topic[NAME_MAX_], group[NAME_MAX_], dead[NAME_MAX_];
    kafka_names(ns, template, topic, group, dead);
    struct txo_kafka_opts o;
    testkafka_opts(&e->kafka, &o, template);
    o.delivery_timeout_ms = 2000;
    return testkafka_publisher(&o);
}

static struct txo_consumer *kafka_consumer(struct env *e, const char *ns,
                                           const struct txo_handler *h)
{
    char template[NAME_MAX_], topic[NAME_MAX_], group[NAME_MAX_], dead[NAME_MAX_];
    kafka_names(ns, template, topic, group, dead);
    struct txo_kafka_opts o;
    testkafka_opts(&e->kafka, &o, template);
    o.topics = topic;
    o.group = group;
    o.retry_delay_ms = 200;
    o.dead_letter_topic = dead;
    struct txo_consumer *c = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_kafka_new(&o, h, NULL, &c, &err) < 0)
        fail_msg("txo_consumer_kafka_new: %s", err.msg);
    return c;
}

static json_t *kafka_read_back(struct env *e, const char *ns)
{
    char template[NAME_MAX_], topic[NAME_MAX_], group[NAME_MAX_], dead[NAME_MAX_];
    kafka_names(ns, template, topic, group, dead);
    struct testkafka_record *r = NULL;
    size_t n = testkafka_read(&e->kafka, topic, &r);
    json_t *all = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *headers = json_object();
        char buf[64];
        for (size_t k = 0; k < TXO_ARRAY_LEN(ce_names); k++) {
            char *v = testkafka_header(&r[i], underscored(ce_names[k], buf, sizeof(buf)));
            if (v != NULL)
                json_object_set_new(headers, ce_names[k], json_string(v));
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
    char template[NAME_MAX_], topic[NAME_MAX_], group[NAME_MAX_], dead[NAME_MAX_];
    kafka_names(ns, template, topic, group, dead);
    struct testkafka_record *r = NULL;
    size_t n = testkafka_read(&e->kafka, dead, &r);
    testkafka_records_free(r, n);
    return (long)n;
}
#endif

#if TXO_WITH_REDIS
static void redis_start(struct env *e)
{
    testredis_start(&e->redis);
}

static void redis_cleanup(struct env *e)
{
    testredis_cleanup(&e->redis);
}

static void redis_kill(struct env *e)
{
    testredis_kill(&e->redis);
}

static void redis_restart(struct env *e)
{
    testredis_restart(&e->redis);
}

static void redis_opts(struct env *e, const char *ns, struct txo_redis_opts *o, char *template,
                       char *stream, char *group)
{
    snprintf(template, NAME_MAX_, "%s.events.{aggregate_type}", ns);
    snprintf(stream, NAME_MAX_, "%s.events.order", ns);
    snprintf(group, NAME_MAX_, "%s-group", ns);
    txo_redis_opts_init(o);
    o->url = e->redis.url;
    o->connect_timeout_ms = 500;
    o->timeout_ms = 1000;
    o->stream_template = template;
    o->stream = stream;
    o->group = group;
    o->claim_idle_ms = 300;
}

static struct txo_publisher *redis_publisher(struct env *e, const char *ns)
{
    char template[NAME_MAX_], stream[NAME_MAX_], group[NAME_MAX_];
    struct txo_redis_opts o;
    redis_opts(e, ns, &o, template, stream, group);
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_redis_new(&o, NULL, &pub, &err) < 0)
        fail_msg("txo_publisher_redis_new: %s", err.msg);
    return pub;
}

static struct txo_consumer *redis_consumer(struct env *e, const char *ns,
                                           const struct txo_handler *h)
{
    char template[NAME_MAX_], stream[NAME_MAX_], group[NAME_MAX_];
    struct txo_redis_opts o;
    redis_opts(e, ns, &o, template, stream, group);
    struct txo_consumer *c = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_redis_new(&o, h, NULL, &c, &err) < 0)
        fail_msg("txo_consumer_redis_new: %s", err.msg);
    return c;
}

static json_t *redis_read_back(struct env *e, const char *ns)
{
    char stream[NAME_MAX_];
    snprintf(stream, sizeof(stream), "%s.events.order", ns);
    json_t *entries = testredis_xrange(&e->redis, stream);
    json_t *all = json_array();
    size_t i;
    json_t *entry;
    json_array_foreach(entries, i, entry)
    {
        json_t *headers = json_object();
        char buf[64];
        for (size_t k = 0; k < TXO_ARRAY_LEN(ce_names); k++) {
            const char *v = testredis_field(entry, underscored(ce_names[k], buf, sizeof(buf)));
            if (v != NULL)
                json_object_set_new(headers, ce_names[k], json_string(v));
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
    char dead[NAME_MAX_];
    snprintf(dead, sizeof(dead), "%s.events.order.dead", ns);
    return (long)testredis_xlen(&e->redis, dead);
}
#endif

#if TXO_WITH_RABBITMQ
static void rabbit_start(struct env *e)
{
    testrabbit_start(&e->rabbit);
}

static void rabbit_cleanup(struct env *e)
{
    testrabbit_cleanup(&e->rabbit);
}

static void rabbit_kill(struct env *e)
{
    testrabbit_kill(&e->rabbit);
}

static void rabbit_restart(struct env *e)
{
    testrabbit_restart(&e->rabbit);
}

/* Exchange "<ns>.x"; the consumer's queue "<ns>-q", pika's observer queue "<ns>-seen". */
static void rabbit_opts(struct env *e, const char *ns, struct txo_rabbitmq_opts *o, char *exchange,
                        char *queue)
{
    snprintf(exchange, NAME_MAX_, "%s.x", ns);
    snprintf(queue, NAME_MAX_, "%s-q", ns);
    txo_rabbitmq_opts_init(o);
    o->url = e->rabbit.url;
    o->connect_timeout_ms = 1000;
    o->exchange = exchange;
    o->queue = queue;
    o->binding_key = "#";
    o->prefetch = 20;
    o->retry_delay_ms = 200;
}

static void rabbit_prepare(struct env *e, const char *ns)
{
    char exchange[NAME_MAX_], seen[NAME_MAX_];
    snprintf(exchange, sizeof(exchange), "%s.x", ns);
    snprintf(seen, sizeof(seen), "%s-seen", ns);
    free(testrabbit_client(&e->rabbit, "declare", seen, exchange, "#", NULL));
}

static struct txo_publisher *rabbit_publisher(struct env *e, const char *ns)
{
    char exchange[NAME_MAX_], queue[NAME_MAX_];
    struct txo_rabbitmq_opts o;
    rabbit_opts(e, ns, &o, exchange, queue);
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_rabbitmq_new(&o, NULL, &pub, &err) < 0)
        fail_msg("txo_publisher_rabbitmq_new: %s", err.msg);
    return pub;
}

static struct txo_consumer *rabbit_consumer(struct env *e, const char *ns,
                                            const struct txo_handler *h)
{
    char exchange[NAME_MAX_], queue[NAME_MAX_];
    struct txo_rabbitmq_opts o;
    rabbit_opts(e, ns, &o, exchange, queue);
    struct txo_consumer *c = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_rabbitmq_new(&o, h, NULL, &c, &err) < 0)
        fail_msg("txo_consumer_rabbitmq_new: %s", err.msg);
    return c;
}

static json_t *rabbit_read_back(struct env *e, const char *ns)
{
    char seen[NAME_MAX_];
    snprintf(seen, sizeof(seen), "%s-seen", ns);
    char *out = testrabbit_client(&e->rabbit, "drain", seen, "1.0", NULL);
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
        for (size_t k = 0; k < TXO_ARRAY_LEN(ce_names); k++) {
            json_t *v = json_object_get(amqp, underscored(ce_names[k], buf, sizeof(buf)));
            if (json_is_string(v))
                json_object_set(headers, ce_names[k], v);
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
    char dlq[NAME_MAX_];
    snprintf(dlq, sizeof(dlq), "%s-q.dlq", ns);
    return testrabbit_count(&e->rabbit, dlq);
}
#endif

#if TXO_WITH_GRPC
static void grpc_start(struct env *e)
{
    testgrpc_start(&e->grpc);
}

static void grpc_cleanup(struct env *e)
{
    testgrpc_cleanup(&e->grpc);
}

static void grpc_kill(struct env *e)
{
    testgrpc_kill(&e->grpc);
}

static void grpc_restart(struct env *e)
{
    testgrpc_restart(&e->grpc);
}

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
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_grpc_new(&o, NULL, &pub, &err) < 0)
        fail_msg("txo_publisher_grpc_new: %s", err.msg);
    return pub;
}

/* The EventSink message carries the payload alone: it is the body. */
static json_t *grpc_read_back(struct env *e, const char *ns)
{
    (void)ns;
    struct testgrpc_event *ev = NULL;
    size_t n = testgrpc_events(&e->grpc, &ev);
    json_t *all = json_array();
    for (size_t i = 0; i < n; i++)
        add_message(all, ev[i].idempotency_key, (const char *)ev[i].payload, NULL);
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
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_webhook_new(&o, &pub, &err) < 0)
        fail_msg("txo_publisher_webhook_new: %s", err.msg);
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
        for (size_t k = 0; k < TXO_ARRAY_LEN(ce_names); k++) {
            json_t *v = json_object_get(http, ce_names[k]);
            if (json_is_string(v))
                json_object_set(headers, ce_names[k], v);
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
     .contracts = C_PUBLISH | C_CLOUDEVENTS | C_CONSUME | C_RESTART,
     .start = nats_start,
     .cleanup = nats_cleanup,
     .kill = nats_kill,
     .restart = nats_restart,
     .publisher = nats_publisher,
     .consumer = nats_consumer,
     .read_back = nats_read_back,
     .shutdown = txo_nats_shutdown}, /* TERM keeps no dead letter */
#endif
#if TXO_WITH_KAFKA
    {.name = "kafka",
     .contracts = C_PUBLISH | C_CLOUDEVENTS | C_CONSUME | C_RESTART,
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
     .contracts = C_PUBLISH | C_CLOUDEVENTS | C_CONSUME | C_RESTART,
     .start = redis_start,
     .cleanup = redis_cleanup,
     .kill = redis_kill,
     .restart = redis_restart,
     .publisher = redis_publisher,
     .consumer = redis_consumer,
     .read_back = redis_read_back,
     .dead_letters = redis_dead_letters},
#endif
#if TXO_WITH_RABBITMQ
    {.name = "rabbitmq",
     .contracts = C_PUBLISH | C_CLOUDEVENTS | C_CONSUME | C_RESTART,
     .start = rabbit_start,
     .cleanup = rabbit_cleanup,
     .kill = rabbit_kill,
     .restart = rabbit_restart,
     .prepare = rabbit_prepare,
     .publisher = rabbit_publisher,
     .consumer = rabbit_consumer,
     .read_back = rabbit_read_back,
     .dead_letters = rabbit_dead_letters},
#endif
#if TXO_WITH_GRPC
    /* The EventSink service is the consumer; its message has no CloudEvents form. */
    {.name = "grpc",
     .contracts = C_PUBLISH | C_RESTART,
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
     .contracts = C_PUBLISH | C_CLOUDEVENTS | C_RESTART,
     .start = web_start,
     .cleanup = web_cleanup,
     .kill = web_kill,
     .restart = web_restart,
     .prepare = web_prepare,
     .publisher = web_publisher,
     .read_back = web_read_back},
};

const size_t transport_n_rows = TXO_ARRAY_LEN(transport_rows);
