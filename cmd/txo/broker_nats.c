/* NATS JetStream as a broker of the daemons (brokers.h): the --nats-* settings and txo/nats.h. */
#include "brokers.h"

#include "txo/nats.h"

static struct {
    const char *url;
    const char *stream;
    const char *subject_prefix;
    const char *durable;
    int64_t ack_timeout_ms;
    int64_t ack_wait_ms;
    unsigned replicas;
} settings;

/* The broker's settings: the cmd_broker below hands them to every daemon's table. */
static const struct setting settings_group[] = {
    {.name = "nats-url",
     .env = "TXO_NATS_URL",
     .type = SETTING_STRING,
     .def = "nats://127.0.0.1:4222",
     .help = "NATS server(s), comma-separated",
     .target = &settings.url},
    {.name = "nats-stream",
     .env = "TXO_NATS_STREAM",
     .type = SETTING_STRING,
     .def = "TXO_EVENTS",
     .help = "JetStream stream (created when missing)",
     .target = &settings.stream},
    {.name = "nats-subject-prefix",
     .env = "TXO_NATS_SUBJECT_PREFIX",
     .type = SETTING_STRING,
     .def = "txo.events",
     .help = "subjects are <prefix>.<aggregate_type>.<event_type>",
     .target = &settings.subject_prefix},
    {.name = "nats-durable",
     .env = "TXO_NATS_DURABLE",
     .type = SETTING_STRING,
     .def = "txo-worker",
     .help = "durable pull consumer the workers share",
     .target = &settings.durable},
    {.name = "nats-ack-timeout",
     .env = "TXO_NATS_ACK_TIMEOUT_MS",
     .type = SETTING_MS,
     .def = "5000",
     .help = "publish acknowledgements awaited up to, milliseconds",
     .min = 1,
     .max = 600000,
     .target = &settings.ack_timeout_ms},
    {.name = "nats-ack-wait",
     .env = "TXO_NATS_ACK_WAIT_MS",
     .type = SETTING_MS,
     .def = "30000",
     .help = "a consumed message not acknowledged within this is delivered again, milliseconds",
     .min = 100,
     .max = 86400000,
     .target = &settings.ack_wait_ms},
    {.name = "nats-replicas",
     .env = "TXO_NATS_REPLICAS",
     .type = SETTING_UINT,
     .def = "1",
     .help = "copies of the stream a created or updated stream keeps (3 on a JetStream cluster "
             "of 3: a publish is acknowledged once a majority stored it)",
     .min = 1,
     .max = 5,
     .target = &settings.replicas},
};

static void nats_opts(struct txo_nats_opts *o)
{
    txo_nats_opts_init(o);
    o->url = settings.url;
    o->stream = settings.stream;
    o->subject_prefix = settings.subject_prefix;
    o->durable = settings.durable;
    o->ack_timeout_ms = settings.ack_timeout_ms;
    o->ack_wait_ms = settings.ack_wait_ms;
    o->replicas = (int)settings.replicas;
}

static int publisher_new(struct txo_metrics *metrics, struct txo_publisher **out,
                         struct txo_error *err)
{
    (void)metrics;
    struct txo_nats_opts o;
    nats_opts(&o);
    return txo_publisher_nats_new(&o, out, err);
}

static int consumer_new(const char *aggregate_type, const char *event_type,
                        const struct txo_handler *h, struct txo_metrics *metrics,
                        struct txo_consumer **out, struct txo_error *err)
{
    (void)metrics;
    struct txo_nats_opts o;
    nats_opts(&o);
    /* The consumer takes its events only: the others are not even fetched. */
    char subject[512];
    int rc = txo_nats_subject(o.subject_prefix, aggregate_type, event_type, subject,
                              sizeof(subject), err);
    if (rc != 0)
        return rc;
    o.filter_subject = subject;
    return txo_consumer_nats_new(&o, h, out, err);
}

static int history_new(struct txo_history **out, struct txo_error *err)
{
    struct txo_nats_opts o;
    nats_opts(&o);
    return txo_history_nats_new(&o, out, err);
}

const struct cmd_broker cmd_broker_nats = {
    .name = "nats",
    .summary = "NATS JetStream",
    .settings = settings_group,
    .n_settings = TXO_ARRAY_LEN(settings_group),
    .publisher_new = publisher_new,
    .consumer_new = consumer_new,
    .history_new = history_new,
    .shutdown = txo_nats_shutdown,
};
