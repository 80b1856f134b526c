/*
 * The outbox auditor: does the broker hold what the outbox says was published, and nothing
 * else? For any database with the outbox tables (a relay-only one included) and a broker
 * whose history can be read without consuming it (txo/history.h: NATS JetStream, Kafka,
 * Redis Streams). `txo audit --outbox` runs it; docs/outbox-audit.md explains the design.
 *
 * Over a window of the outbox, a range of created_at or of ids, it checks:
 *   missing  every PUBLISHED event of the window is at the broker (matched by its
 *            idempotency key, which every publisher sends beside the body);
 *   extra    every message the broker stored in the window carries the key of an outbox
 *            row (any row, in or out of the window: the edges of the window are no
 *            reason for a finding);
 *   pending  no event has waited to be published (PENDING or PROCESSING) for longer than
 *            pending_older_than_s, wherever it is: a stuck event is news whatever the window.
 * A check that cannot be done says so instead of guessing:
 *   broker_trimmed  an event not found at the broker that may have been stored before the
 *                   oldest message the broker still holds (its retention dropped the start);
 *   outbox_trimmed  a message whose key no outbox row has, stored when the outbox may
 *                   already have deleted its row (txo clean deletes PUBLISHED rows by age).
 * So the window must lie inside both retentions for a full answer.
 *
 * Reads only: SELECTs on outbox_events, each a statement of its own (READ COMMITTED), and the
 * broker's history; nothing is written anywhere. The broker is read after the window's
 * events, so every event marked PUBLISHED by then was stored before the read (the relay marks
 * after the broker's acknowledgement), and a message read has a committed row (the relay
 * publishes committed rows only).
 *
 * Times: the broker's clock and the database's (and, for Kafka, the relay's) differ a little,
 * and a broker stores a message a moment before the relay marks it PUBLISHED. clock_skew_ms
 * widens every comparison between the two by that much.
 *
 * Thread-safety: one call uses its db and reader only.
 */
#ifndef TXO_AUDIT_H
#define TXO_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/db.h"
#include "txo/err.h"
#include "txo/history.h"

/* What a finding is about. Part of the output's contract: add kinds at the end. */
enum txo_audit_kind {
    TXO_AUDIT_MISSING = 0,    /* a PUBLISHED event of the window the broker does not hold */
    TXO_AUDIT_EXTRA,          /* a message at the broker, in the window, no outbox row has */
    TXO_AUDIT_PENDING,        /* an event not published for longer than the threshold */
    TXO_AUDIT_BROKER_TRIMMED, /* not found, but maybe from before the broker's horizon */
    TXO_AUDIT_OUTBOX_TRIMMED, /* not in the outbox, but maybe from before its horizon */
    TXO_AUDIT_SEQUENCE_GAP,   /* published before the event it follows in its aggregate
                               * (prev_sequence): that one is not published, or came later */
    TXO_AUDIT_KIND_COUNT
};

/* "missing", "extra", "pending", "broker_trimmed", "outbox_trimmed", "sequence_gap"; "?"
 * otherwise. */
TXO_API const char *txo_audit_kind_name(enum txo_audit_kind kind);

/* One finding. Strings are borrowed for the report call; fields that do not apply are 0/NULL. */
struct txo_audit_finding {
    enum txo_audit_kind kind;
    int64_t event_id;        /* the outbox row (not for extra and outbox_trimmed) */
    const char *key;         /* idempotency key; NULL for a broker message without one */
    const char *status;      /* pending: "PENDING" or "PROCESSING"; sequence_gap: the state of
                              * the event it follows */
    int attempts;            /* pending: publish attempts so far */
    int64_t created_at_us;   /* the row's created_at */
    int64_t published_at_us; /* missing, broker_trimmed, sequence_gap: the row's published_at */
    int64_t broker_time_us;  /* extra, outbox_trimmed: the message's time at the broker */
    const char *position;    /* extra, outbox_trimmed: where the broker keeps the message */
    const char *detail;      /* pending: the last publish error (may be NULL); sequence_gap:
                              * the aggregate, the two sequences and what is wrong */
};

typedef void (*txo_audit_report_fn)(void *arg, const struct txo_audit_finding *f);

struct txo_audit_opts {
    /* The window: ids from_id..to_id (inclusive) when to_id > 0, else created_at in
     * [since_us, until_us) (microseconds since the epoch, UTC). */
    int64_t from_id;
    int64_t to_id;
    int64_t since_us;
    int64_t until_us;
    unsigned pending_older_than_s; /* 0: no pending check; default 300 */
    int64_t clock_skew_ms;         /* default 30000 */
    /* Most PUBLISHED events of the window, and most broker messages without a match in it,
     * held in memory; more fail the call with TXO_EINVAL (narrow the window). Default
     * 1000000. */
    size_t max_events;
    txo_audit_report_fn report; /* every finding, as found (may be NULL) */
    void *report_arg;
};

/* Fills o with the defaults above: no window (an empty created_at range), no report. */
TXO_API void txo_audit_opts_init(struct txo_audit_opts *o);

/* What the audit looked at and found. */
struct txo_audit_result {
    int64_t now_us;                       /* the database's clock when the audit started */
    uint64_t found[TXO_AUDIT_KIND_COUNT]; /* findings per kind */
    uint64_t events;                      /* PUBLISHED events of the window */
    uint64_t messages;                    /* broker messages read */
    uint64_t duplicates;                  /* extra copies of an event of the window */
    int64_t window_from_us, window_to_us; /* the time span compared with the broker */
    int64_t read_from_us, read_to_us;     /* what was read from the broker */
    int64_t broker_held_from_us;          /* TXO_HISTORY_ALL, or the broker's horizon */
    char broker_held_from_where[256];
    int64_t outbox_held_from_us; /* TXO_HISTORY_ALL, or the oldest published_at left */
};

/* True when every check passed: no finding of any kind. */
TXO_API bool txo_audit_clean(const struct txo_audit_result *r);

/*
 * Runs the checks (see the top of this file) on db and, when broker is not NULL, the broker's
 * history; broker NULL runs the outbox's own checks only (pending). Every finding goes to
 * opts->report as it is found, and is counted in *out (written also when the call fails
 * midway: what was found until then).
 *
 * Returns 0 when the audit ran (whatever it found). Errors: TXO_EINVAL (bad opts: a window
 * whose end is before its start, no window; a window with more than max_events events),
 * the broker reader's errors (TXO_EUNAVAILABLE, TXO_ETIMEOUT, TXO_ENOTFOUND, ...), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_audit_outbox(struct txo_db *db, struct txo_history *broker,
                                            const struct txo_audit_opts *opts,
                                            struct txo_audit_result *out, struct txo_error *err);

#endif
