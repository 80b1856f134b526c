/*
 * A gRPC service of the application's own as a broker of the relay (brokers.h): the --grpc-*
 * settings and txo/grpc.h. Publishing only: the service is the consumer, so there is no
 * consuming side for `txo worker` or `txo up`.
 */
#include "brokers.h"

#include "txo/grpc.h"

static struct {
    const char *target;
    int64_t deadline_ms;
    int64_t keepalive_ms;
    unsigned max_batch_bytes;
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
} settings;

/* The broker's settings: the cmd_broker below hands them to every daemon's table. */
static const struct setting settings_group[] = {
    {.name = "grpc-target",
     .env = "TXO_GRPC_TARGET",
     .type = SETTING_STRING,
     .def = "127.0.0.1:50051",
     .help = "the EventSink service (proto/txo/v1/event_sink.proto), host:port or a gRPC "
             "target such as dns:///sink.internal:50051; plaintext unless --grpc-ca-file",
     .target = &settings.target},
    {.name = "grpc-deadline",
     .env = "TXO_GRPC_DEADLINE_MS",
     .type = SETTING_MS,
     .def = "5000",
     .help = "deadline of one Publish call, milliseconds; a call past it is retried (the "
             "server may have taken it: it de-duplicates on the idempotency key)",
     .min = 1,
     .max = 600000,
     .target = &settings.deadline_ms},
    {.name = "grpc-keepalive",
     .env = "TXO_GRPC_KEEPALIVE_MS",
     .type = SETTING_MS,
     .def = "30000",
     .help = "keep-alive ping interval while a call is in flight, milliseconds (the server "
             "must permit pings this often)",
     .min = 1000,
     .max = 86400000,
     .target = &settings.keepalive_ms},
    {.name = "grpc-max-batch-bytes",
     .env = "TXO_GRPC_MAX_BATCH_BYTES",
     .type = SETTING_UINT,
     .def = "4000000",
     .help = "largest encoded PublishRequest; a bigger batch goes as several calls, one "
             "event bigger than this is dead-lettered",
     .min = 1024,
     .max = 1073741824,
     .target = &settings.max_batch_bytes},
    {.name = "grpc-ca-file",
     .env = "TXO_GRPC_CA_FILE",
     .type = SETTING_STRING,
     .def = NULL,
     .help = "TLS: PEM certificates the server's certificate is verified against (unset: "
             "plaintext)",
     .target = &settings.ca_file},
    {.name = "grpc-cert-file",
     .env = "TXO_GRPC_CERT_FILE",
     .type = SETTING_STRING,
     .def = NULL,
     .help = "TLS: client certificate (PEM) for a server that requires one; with "
             "--grpc-key-file",
     .target = &settings.cert_file},
    {.name = "grpc-key-file",
     .env = "TXO_GRPC_KEY_FILE",
     .type = SETTING_STRING,
     .def = NULL,
     .help = "TLS: the client certificate's private key (PEM)",
     .target = &settings.key_file},
};

/* TXO_GRPC_CA_FILE= (empty) means unset, as in an environment file. */
static const char *unset_if_empty(const char *s)
{
    return s != NULL && s[0] != '\0' ? s : NULL;
}

static int publisher_new(struct txo_metrics *metrics, struct txo_publisher **out,
                         struct txo_error *err)
{
    struct txo_grpc_opts o;
    txo_grpc_opts_init(&o);
    o.target = settings.target;
    o.deadline_ms = settings.deadline_ms;
    o.keepalive_ms = settings.keepalive_ms;
    o.max_batch_bytes = settings.max_batch_bytes;
    o.ca_file = unset_if_empty(settings.ca_file);
    o.cert_file = unset_if_empty(settings.cert_file);
    o.key_file = unset_if_empty(settings.key_file);
    return txo_publisher_grpc_new(&o, metrics, out, err);
}

const struct cmd_broker cmd_broker_grpc = {
    .name = "grpc",
    .summary = "a gRPC EventSink service of your own; publishing only",
    .settings = settings_group,
    .n_settings = TXO_ARRAY_LEN(settings_group),
    .publisher_new = publisher_new,
    .consumer_new = NULL, /* the service consumes: nothing to poll */
    .no_history = "the receiving service keeps no history the relay could read back",
    .shutdown = NULL, /* gRPC shuts down with its last publisher (txo/grpc.h) */
};
