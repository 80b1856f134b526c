/*
 * `txo audit --outbox`: the outbox auditor (txo/audit.h) as a command, for any database with the
 * outbox tables and a broker whose history can be read back (nats, kafka, redis). cmd_audit.c
 * owns the command and its one settings table; this file adds the outbox audit's settings to
 * it, checks them, runs the audit and prints what it found.
 *
 * Output (stdout): a table of the findings, the first --max-listed of each kind; then a line
 * per kind with more, the notes that explain a trimmed window, and last a logfmt summary line
 * of fixed keys for monitoring. With --json, one JSON document of the same (listing.h). Exit
 * status: 0 clean, 1 findings (or the audit could not run), 2 bad settings, found before anything
 * is connected to.
 */
#ifndef TXO_CMD_AUDIT_OUTBOX_H
#define TXO_CMD_AUDIT_OUTBOX_H

#include <stdbool.h>

#include "settings.h"
#include "txo/audit.h"

struct audit_outbox_settings {
    bool outbox;
    const char *publisher;
    const char *since;
    const char *until;
    const char *from_id;
    const char *to_id;
    struct txo_audit_opts opts; /* the thresholds; the window: parsed from the text above */
    unsigned max_listed;
};

/* Appends --outbox, the window, the thresholds and the settings of every broker with a
 * history reader (the relay's own --nats-*, --kafka-*, --redis-* settings). */
void audit_outbox_add_settings(struct settings_table *t, struct audit_outbox_settings *s);

/* Runs the outbox audit with the parsed settings and prints what it found: a table and the
 * summary line, or with json one JSON document; returns the exit status. */
int audit_outbox_run(const struct audit_outbox_settings *s, const struct common_opts *common,
                     bool json);

#endif
