/*
 * RabbitMQ as a broker of the daemons (brokers.h): the --rabbitmq-* settings and txo/rabbitmq.h.
 * The worker's queue is bound with the routing key of the events it handles
 * ("order.OrderCreated"), so it receives nothing else.
 */
#include "brokers.h"

#include "txo/rabbitmq.h"

static struct {
    const char *url;
    const char *exchange;
    const char *queue;
    unsigned prefetch;
    int64_t confirm_timeout_ms;
    int64_t retry_delay_ms;
    bool mandatory;
} settings;

/* The broker's settings: the cmd_broker below hands them to every daemon's table. */
static const struct setting settings_group[] = {
    {.name = "rabbitmq-url",
     .env = "TXO_RABBITMQ_URL",
     .type = SETTING_STRING,
     .def = "amqp://guest:guest@127.0.0.1:5672/",
     .help = "RabbitMQ broker, amqp://user:password@host:port/vhost (empty vhost: \"/\")",
     .secret = true,
     .target = &settings.url},
    {.name = "rabbitmq-exchange",
     .env = "TXO_RABBITMQ_EXCHANGE",
     .type = SETTING_STRING,
     .def = "txo.events",
     .help = "durable topic exchange (declared); routing keys <aggregate_type>.<event_type>",
     .target = &settings.exchange},
    {.name = "rabbitmq-queue",
     .env = "TXO_RABBITMQ_QUEUE",
     .type = SETTING_STRING,
     .def = "txo-worker",
     .help = "durable queue the workers share (declared, with <queue>.retry, .dlx and .dlq)",
     .target = &settings.queue},
    {.name = "rabbitmq-prefetch",
     .env = "TXO_RABBITMQ_PREFETCH",
     .type = SETTING_UINT,
     .def = "100",
     .help = "deliveries a worker holds unacknowledged at most (basic.qos)",
     .min = 1,
     .max = 65535,
     .target = &settings.prefetch},
    {.name = "rabbitmq-confirm-timeout",
     .env = "TXO_RABBITMQ_CONFIRM_TIMEOUT_MS",
     .type = SETTING_MS,
     .def = "5000",
     .help = "publisher confirms awaited up to, milliseconds (then: maybe delivered, retried)",
     .min = 1,
     .max = 600000,
     .target = &settings.confirm_timeout_ms},
    {.name = "rabbitmq-retry-delay",
     .env = "TXO_RABBITMQ_RETRY_DELAY_MS",
     .type = SETTING_MS,
     .def = "1000",
     .help = "a message whose handler failed transiently is delivered again after, "
             "milliseconds",
     .min = 0,
     .max = 86400000,
     .target = &settings.retry_delay_ms},
    {.name = "rabbitmq-mandatory",
     .env = "TXO_RABBITMQ_MANDATORY",
     .type = SETTING_BOOL,
     .def = "true",
     .help = "an event no queue is bound for fails at once (dead-lettered); false: "
             "RabbitMQ drops it",
     .target = &settings.mandatory},
};

static void rabbitmq_opts(struct txo_rabbitmq_opts *o)
{
    txo_rabbitmq_opts_init(o);
    o->url = settings.url;
    o->exchange = settings.exchange;
    o->queue = settings.queue;
    o->prefetch = (int)settings.prefetch;
    o->confirm_timeout_ms = settings.confirm_timeout_ms;
    o->retry_delay_ms = settings.retry_delay_ms;
    o->mandatory = settings.mandatory;
}

static int publisher_new(struct txo_metrics *metrics, struct txo_publisher **out,
                         struct txo_error *err)
{
    struct txo_rabbitmq_opts o;
    rabbitmq_opts(&o);
    return txo_publisher_rabbitmq_new(&o, metrics, out, err);
}

static int consumer_new(const char *aggregate_type, const char *event_type,
                        const struct txo_handler *h, struct txo_metrics *metrics,
                        struct txo_consumer **out, struct txo_error *err)
{
    struct txo_rabbitmq_opts o;
    rabbitmq_opts(&o);
    char key[256];
    int rc = txo_rabbitmq_routing_key(aggregate_type, event_type, key, sizeof(key), err);
    if (rc != 0)
        return rc;
    o.binding_key = key;
    return txo_consumer_rabbitmq_new(&o, h, metrics, out, err);
}

const struct cmd_broker cmd_broker_rabbitmq = {
    .name = "rabbitmq",
    .summary = "RabbitMQ, AMQP 0-9-1",
    .settings = settings_group,
    .n_settings = TXO_ARRAY_LEN(settings_group),
    .publisher_new = publisher_new,
    .consumer_new = consumer_new,
    .no_history = "reading a queue consumes it: the messages would be gone for the application's "
                  "consumers",
    .shutdown = NULL, /* rabbitmq-c keeps no process-wide state */
};
