/* Apache Kafka as a broker of the daemons (brokers.h): the --kafka-* settings and txo/kafka.h. */
#include "brokers.h"

#include <stdlib.h>
#include <string.h>

#include "txo/alloc.h"
#include "txo/kafka.h"

#define PROPERTIES_MAX 64

static struct {
    const char *brokers;
    const char *topic_template;
    const char *group;
    int64_t delivery_timeout_ms;
    int64_t retry_delay_ms;
    const char *dead_letter_topic;
    const char *properties; /* "key=value,key=value" */
} settings;

/* The broker's settings: the cmd_broker below hands them to every daemon's table. */
static const struct setting settings_group[] = {
    {.name = "kafka-brokers",
     .env = "TXO_KAFKA_BROKERS",
     .type = SETTING_STRING,
     .def = "127.0.0.1:9092",
     .help = "Kafka bootstrap servers, host:port comma-separated",
     .target = &settings.brokers},
    {.name = "kafka-topic-template",
     .env = "TXO_KAFKA_TOPIC_TEMPLATE",
     .type = SETTING_STRING,
     .def = "txo.events.{aggregate_type}",
     .help = "topic of an event; {aggregate_type} and {event_type} are replaced (one topic "
             "per aggregate type keeps an aggregate's events in order)",
     .target = &settings.topic_template},
    {.name = "kafka-group",
     .env = "TXO_KAFKA_GROUP",
     .type = SETTING_STRING,
     .def = "txo-worker",
     .help = "consumer group the workers share (group.id)",
     .target = &settings.group},
    {.name = "kafka-delivery-timeout",
     .env = "TXO_KAFKA_DELIVERY_TIMEOUT_MS",
     .type = SETTING_MS,
     .def = "10000",
     .help = "a published batch waits up to this for its delivery reports, milliseconds",
     .min = 1,
     .max = 600000,
     .target = &settings.delivery_timeout_ms},
    {.name = "kafka-retry-delay",
     .env = "TXO_KAFKA_RETRY_DELAY_MS",
     .type = SETTING_MS,
     .def = "1000",
     .help = "a consumed record whose handling failed transiently is handled again after "
             "this, milliseconds (its partition waits meanwhile)",
     .min = 0,
     .max = 3600000,
     .target = &settings.retry_delay_ms},
    {.name = "kafka-dead-letter-topic",
     .env = "TXO_KAFKA_DEAD_LETTER_TOPIC",
     .type = SETTING_STRING,
     .help = "topic a consumed record the worker rejects is copied to (unset: it is only "
             "logged, then committed past)",
     .target = &settings.dead_letter_topic},
    {.name = "kafka-property",
     .env = "TXO_KAFKA_PROPERTIES",
     .type = SETTING_STRING,
     .help = "extra librdkafka properties, key=value comma-separated (security.protocol, "
             "sasl.*, linger.ms, ...)",
     .secret = true,
     .target = &settings.properties},
};

/* The options from the settings; props (owned, free with txo_free, also after a failure)
 * holds the property list that o->properties points into. */
struct kafka_cli_opts {
    struct txo_kafka_opts o;
    char *props;
    const char *list[PROPERTIES_MAX];
};

static int kafka_opts(struct kafka_cli_opts *k, struct txo_error *err)
{
    memset(k, 0, sizeof(*k));
    txo_kafka_opts_init(&k->o);
    k->o.brokers = settings.brokers;
    k->o.topic_template = settings.topic_template;
    k->o.group = settings.group;
    k->o.delivery_timeout_ms = settings.delivery_timeout_ms;
    k->o.retry_delay_ms = settings.retry_delay_ms;
    if (settings.dead_letter_topic != NULL && settings.dead_letter_topic[0] != '\0')
        k->o.dead_letter_topic = settings.dead_letter_topic;
    char topic[256];
    struct txo_error terr;
    txo_error_init(&terr);
    if (txo_kafka_topic(k->o.topic_template, "order", "OrderCreated", topic, sizeof(topic), &terr) <
        0)
        return txo_error_set(err, TXO_EINVAL, "--kafka-topic-template: %s", terr.msg);
    if (settings.properties == NULL || settings.properties[0] == '\0')
        return 0;
    k->props = txo_strdup(settings.properties);
    if (k->props == NULL)
        return txo_error_set(err, TXO_ENOMEM, "--kafka-property: out of memory");
    size_t n = 0;
    for (char *s = k->props; *s != '\0';) {
        size_t len = strcspn(s, ",");
        bool last = s[len] == '\0';
        s[len] = '\0';
        if (len > 0) {
            /* The caller frees k->props; the text may hold a secret, so it is not echoed. */
            if (n == PROPERTIES_MAX)
                return txo_error_set(err, TXO_EINVAL, "--kafka-property: more than %d properties",
                                     PROPERTIES_MAX);
            if (strchr(s, '=') == NULL || s[0] == '=')
                return txo_error_set(err, TXO_EINVAL,
                                     "--kafka-property: entry %zu is not key=value", n + 1);
            k->list[n++] = s;
        }
        s += len + (last ? 0 : 1);
    }
    k->o.properties = k->list;
    k->o.n_properties = n;
    return 0;
}

static int publisher_new(struct txo_metrics *metrics, struct txo_publisher **out,
                         struct txo_error *err)
{
    struct kafka_cli_opts k;
    int rc = kafka_opts(&k, err);
    if (rc == 0)
        rc = txo_publisher_kafka_new(&k.o, metrics, out, err);
    txo_free(k.props);
    return rc;
}

static int consumer_new(const char *aggregate_type, const char *event_type,
                        const struct txo_handler *h, struct txo_metrics *metrics,
                        struct txo_consumer **out, struct txo_error *err)
{
    struct kafka_cli_opts k;
    int rc = kafka_opts(&k, err);
    if (rc != 0)
        return rc;
    /*
     * The topic holds every event of the aggregate type (with the default template): the
     * consumer commits past the other types without calling the handler.
     */
    char topic[256];
    rc = txo_kafka_topic(k.o.topic_template, aggregate_type, event_type, topic, sizeof(topic), err);
    if (rc == 0) {
        k.o.topics = topic;
        k.o.event_type = event_type;
        rc = txo_consumer_kafka_new(&k.o, h, metrics, out, err);
    }
    txo_free(k.props);
    return rc;
}

static int history_new(struct txo_history **out, struct txo_error *err)
{
    struct kafka_cli_opts k;
    int rc = kafka_opts(&k, err);
    if (rc == 0)
        rc = txo_history_kafka_new(&k.o, out, err);
    txo_free(k.props);
    return rc;
}

const struct cmd_broker cmd_broker_kafka = {
    .name = "kafka",
    .summary = "Apache Kafka",
    .settings = settings_group,
    .n_settings = TXO_ARRAY_LEN(settings_group),
    .publisher_new = publisher_new,
    .consumer_new = consumer_new,
    .history_new = history_new,
    .shutdown = NULL,
};
