/*
 * Redis Streams as a broker of the daemons (brokers.h): the --redis-* settings and txo/redis.h.
 *
 * The worker's consumer reads the stream its events are published to (the stream template
 * filled with its aggregate and event type) in the consumer group --redis-group; entries of
 * other event types in that stream (OrderCancelled next to OrderCreated in txo.events.order)
 * are acknowledged for the group without calling the handler. So every kind of consumer of a
 * stream needs a group of its own.
 */
#include "brokers.h"

#include "txo/redis.h"

static struct {
    const char *url;
    const char *stream_template;
    const char *group;
    int64_t claim_idle_ms;
    unsigned maxlen;
    int64_t timeout_ms;
} settings;

/* The broker's settings: the cmd_broker below hands them to every daemon's table. */
static const struct setting settings_group[] = {
    {.name = "redis-url",
     .env = "TXO_REDIS_URL",
     .type = SETTING_STRING,
     .def = "redis://127.0.0.1:6379/0",
     .help = "Redis server, redis://[[user]:password@]host[:port][/db]",
     .secret = true,
     .target = &settings.url},
    {.name = "redis-stream-template",
     .env = "TXO_REDIS_STREAM_TEMPLATE",
     .type = SETTING_STRING,
     .def = "txo.events.{aggregate_type}",
     .help = "stream of an event; {aggregate_type} and {event_type} are replaced",
     .target = &settings.stream_template},
    {.name = "redis-group",
     .env = "TXO_REDIS_GROUP",
     .type = SETTING_STRING,
     .def = "txo-worker",
     .help = "consumer group the workers share (created at the start of the stream)",
     .target = &settings.group},
    {.name = "redis-claim-idle",
     .env = "TXO_REDIS_CLAIM_IDLE_MS",
     .type = SETTING_MS,
     .def = "30000",
     .help = "an entry delivered but not acknowledged for this long is claimed and handled "
             "again (the redelivery delay), milliseconds",
     .min = 100,
     .max = 86400000,
     .target = &settings.claim_idle_ms},
    {.name = "redis-maxlen",
     .env = "TXO_REDIS_MAXLEN",
     .type = SETTING_UINT,
     .def = "0",
     .help = "trim each stream to about this many entries on XADD (MAXLEN ~), 0 = never",
     .min = 0,
     .max = 4000000000UL,
     .target = &settings.maxlen},
    {.name = "redis-timeout",
     .env = "TXO_REDIS_TIMEOUT_MS",
     .type = SETTING_MS,
     .def = "5000",
     .help = "replies awaited up to (a whole pipelined batch for the relay), milliseconds",
     .min = 1,
     .max = 600000,
     .target = &settings.timeout_ms},
};

static void redis_opts(struct txo_redis_opts *o)
{
    txo_redis_opts_init(o);
    o->url = settings.url;
    o->stream_template = settings.stream_template;
    o->group = settings.group;
    o->claim_idle_ms = settings.claim_idle_ms;
    o->maxlen = settings.maxlen;
    o->timeout_ms = settings.timeout_ms;
}

static int publisher_new(struct txo_metrics *metrics, struct txo_publisher **out,
                         struct txo_error *err)
{
    struct txo_redis_opts o;
    redis_opts(&o);
    return txo_publisher_redis_new(&o, metrics, out, err);
}

static int consumer_new(const char *aggregate_type, const char *event_type,
                        const struct txo_handler *h, struct txo_metrics *metrics,
                        struct txo_consumer **out, struct txo_error *err)
{
    struct txo_redis_opts o;
    redis_opts(&o);
    char stream[512];
    int rc = txo_redis_stream_name(o.stream_template, aggregate_type, event_type, stream,
                                   sizeof(stream), err);
    if (rc != 0)
        return rc;
    o.stream = stream;
    o.event_type = event_type;
    return txo_consumer_redis_new(&o, h, metrics, out, err);
}

static int history_new(struct txo_history **out, struct txo_error *err)
{
    struct txo_redis_opts o;
    redis_opts(&o);
    return txo_history_redis_new(&o, out, err);
}

const struct cmd_broker cmd_broker_redis = {
    .name = "redis",
    .summary = "Redis Streams",
    .settings = settings_group,
    .n_settings = TXO_ARRAY_LEN(settings_group),
    .publisher_new = publisher_new,
    .consumer_new = consumer_new,
    .history_new = history_new,
    .shutdown = NULL,
};
