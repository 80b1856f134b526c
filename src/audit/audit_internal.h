/*
 * Private to the outbox auditor (src/audit): the state of one audit, shared by its checks
 * (audit.c runs them, audit_broker.c compares the outbox with the broker), and the key set
 * both sides of that comparison are held in (audit_keys.c).
 */
#ifndef TXO_AUDIT_INTERNAL_H
#define TXO_AUDIT_INTERNAL_H

#include "txo/audit.h"

/* One audit: borrowed inputs, the result being filled, and the times everything is measured
 * against. Used by one thread. */
struct audit {
    struct txo_db *db;
    struct txo_history *broker; /* NULL: no broker checks */
    const struct txo_audit_opts *opts;
    struct txo_audit_result *out;
    int64_t now_us;  /* the database's NOW(6) when the audit started */
    int64_t skew_us; /* opts->clock_skew_ms in microseconds */
};

/* Counts f in a->out and hands it to the report callback. */
void txo__audit_report(struct audit *a, const struct txo_audit_finding *f);

/*
 * The missing and extra checks (audit_broker.c): reads the window's PUBLISHED events, the
 * broker's messages around the window, and looks up the keys of the unmatched messages.
 * Fills out->events, messages, duplicates, the spans and horizons. Errors: TXO_EINVAL (more
 * than max_events), the reader's, DB errors.
 */
int txo__audit_check_broker(struct audit *a, struct txo_error *err);

/*
 * Bytes that live as long as the audit: chunks that are freed all at once. Zero-initialise,
 * release with txo__audit_arena_release().
 */
struct audit_arena {
    struct audit_chunk *head;
};

/* A copy of s[0..len) plus a NUL in the arena, or NULL when out of memory. */
char *txo__audit_arena_strndup(struct audit_arena *ar, const char *s, size_t len);
void txo__audit_arena_release(struct audit_arena *ar);

/*
 * A set of idempotency keys, each with an index: 0, 1, 2, ... in the order they were added,
 * so the owner keeps what it needs per key in arrays of its own. Keys are copied into the
 * set's arena. Zero-initialise, release with txo__audit_keys_release().
 */
struct audit_keys {
    struct audit_arena arena;
    const char **keys; /* keys[index] */
    size_t n, cap;
    uint32_t *slots; /* open addressing: index + 1, 0 = empty; n_slots a power of two */
    size_t n_slots;
};

#define AUDIT_NO_KEY SIZE_MAX

/* Adds key (len bytes) unless it is there; *index gets its index either way, *added whether it
 * was new. Returns 0 or TXO_ENOMEM (the set is unchanged then). */
int txo__audit_keys_add(struct audit_keys *ks, const char *key, size_t len, size_t *index,
                        bool *added);

/* The index of key, or AUDIT_NO_KEY. */
size_t txo__audit_keys_find(const struct audit_keys *ks, const char *key, size_t len);

void txo__audit_keys_release(struct audit_keys *ks);

#endif
