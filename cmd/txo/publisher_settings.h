/*
 * What a command publishes with: --publisher (log, null, webhook or a broker built in), the
 * envelope format and the webhook's settings, shared by `txo relay` and `txo replay`; each
 * broker's own --<broker>-* settings live in its broker_<name>.c (brokers.h).
 */
#ifndef TXO_CMD_PUBLISHER_SETTINGS_H
#define TXO_CMD_PUBLISHER_SETTINGS_H

#include <stdbool.h>
#include <stdint.h>

#include "settings.h"
#include "txo/metrics.h"
#include "txo/publisher.h"
#include "txo/webhook.h"

struct publisher_settings {
    const char *publisher;
    const char *envelope;
    const char *envelope_source;
    struct txo_webhook_opts webhook;
};

/* Appends --publisher, --envelope and --envelope-source (targets in o). */
void settings_add_publisher(struct settings_table *t, struct publisher_settings *o);

/* Appends the webhook publisher's settings (targets in o->webhook, first set to the library's
 * defaults). */
void settings_add_webhook(struct settings_table *t, struct publisher_settings *o);

/* Checks the parsed settings of command cmd ("relay") and sets the envelope format; false
 * after saying why on stderr (the command exits 2). */
bool publisher_settings_apply(const char *cmd, const struct publisher_settings *o);

/* The publisher the settings name; metrics (may be NULL) gets its families. The log publisher
 * writes to stdout. */
int publisher_settings_make(const struct publisher_settings *o, struct txo_metrics *metrics,
                            struct txo_publisher **out, struct txo_error *err);

#endif
