/*
 * The publisher settings shared by the commands that publish (publisher_settings.h).
 */
#include <stdio.h>
#include <string.h>

#include "brokers.h"
#include "cli_errors.h"
#include "publisher_settings.h"

void settings_add_publisher(struct settings_table *t, struct publisher_settings *o)
{
    const struct setting publisher[] = {
        {.name = "publisher",
         .env = "TXO_PUBLISHER",
         .type = SETTING_STRING,
         .def = "log",
         .help = cmd_broker_choice_help(CMD_BROKER_CHOICE_RELAY),
         .target = &o->publisher},
        {.name = "envelope",
         .env = "TXO_ENVELOPE",
         .type = SETTING_STRING,
         .def = "txo",
         .help = "what each published message is: txo (txo's JSON envelope), cloudevents "
                 "(CloudEvents 1.0, structured JSON mode) or cloudevents-binary (binary mode: "
                 "the payload as the body, the attributes as the transport's headers: ce-* of "
                 "a webhook POST or a NATS message, ce_* of a Kafka or AMQP message or a Redis "
                 "entry (docs/brokers.md); the log publisher writes structured mode)",
         .target = &o->envelope},
        {.name = "envelope-source",
         .env = "TXO_ENVELOPE_SOURCE",
         .type = SETTING_STRING,
         .def = "/txo/outbox",
         .help = "the CloudEvents source attribute (a URI reference naming this outbox)",
         .target = &o->envelope_source},
    };
    settings_add(t, publisher, TXO_ARRAY_LEN(publisher));
}

void settings_add_webhook(struct settings_table *t, struct publisher_settings *o)
{
    txo_webhook_opts_init(&o->webhook);
    const struct setting webhook[] = {
        {.name = "webhook-url",
         .env = "TXO_WEBHOOK_URL",
         .type = SETTING_STRING,
         .help = "endpoint the webhook publisher POSTs each event to",
         .target = &o->webhook.url},
        {.name = "webhook-timeout",
         .env = "TXO_WEBHOOK_TIMEOUT_MS",
         .type = SETTING_MS,
         .def = "5000",
         .help = "whole-request timeout of the webhook publisher, milliseconds",
         .min = 1,
         .max = 600000,
         .target = &o->webhook.timeout_ms},
        {.name = "webhook-token",
         .env = "TXO_WEBHOOK_TOKEN",
         .type = SETTING_STRING,
         .help = "bearer token the webhook publisher sends (Authorization header)",
         .secret = true,
         .target = &o->webhook.bearer_token},
    };
    settings_add(t, webhook, TXO_ARRAY_LEN(webhook));
}

bool publisher_settings_apply(const char *cmd, const struct publisher_settings *o)
{
    if (cmd_broker_refuse_left_out(cmd, "publisher", o->publisher))
        return false;
    static const char *const publishers[] = {"log", "null", "webhook"};
    bool known = cmd_broker_find(o->publisher) != NULL;
    for (size_t i = 0; i < TXO_ARRAY_LEN(publishers); i++)
        known = known || strcmp(o->publisher, publishers[i]) == 0;
    if (!known) {
        cli_error("txo %s: --publisher must be %s, got \"%s\"%s", cmd,
                  cmd_broker_names(CMD_BROKER_CHOICE_RELAY), o->publisher,
                  strcmp(o->publisher, "local") == 0
                      ? " (local dispatch needs the consumer in the same process: use `txo up`)"
                      : "");
        return false;
    }
    if (strcmp(o->publisher, "webhook") == 0 &&
        (o->webhook.url == NULL || o->webhook.url[0] == '\0')) {
        cli_error("txo %s: --publisher webhook needs --webhook-url", cmd);
        return false;
    }
    enum txo_envelope_format envelope;
    if (txo_envelope_format_parse(o->envelope, &envelope) < 0) {
        cli_error("txo %s: --envelope must be txo, cloudevents or cloudevents-binary, got "
                  "\"%s\"",
                  cmd, o->envelope);
        return false;
    }
    struct txo_error env_err;
    txo_error_init(&env_err);
    if (txo_envelope_set_default(envelope, o->envelope_source, &env_err) < 0) {
        cli_error("txo %s: --envelope-source: %s", cmd, env_err.msg);
        return false;
    }
    return true;
}

int publisher_settings_make(const struct publisher_settings *o, struct txo_metrics *metrics,
                            struct txo_publisher **pub, struct txo_error *err)
{
    const char *name = o->publisher;
    const struct cmd_broker *broker = cmd_broker_find(name);
    if (broker != NULL)
        return broker->publisher_new(metrics, pub, err);
    if (strcmp(name, "log") == 0)
        return txo_publisher_log_new(stdout, pub, err);
    if (strcmp(name, "null") == 0)
        return txo_publisher_null_new(pub, err);
    if (strcmp(name, "webhook") == 0)
        return txo_publisher_webhook_new(&o->webhook, pub, err);
    return txo_error_set(err, TXO_EINVAL, "unknown publisher");
}
