/*
 * Private to the consumers (src/broker/<name>_consumer.c) and local dispatch (local.c): the one
 * place a struct txo_handler is checked and run, so that every transport's poll loop has one
 * path whether the application gave a per-message or a batch handler. Defined in consumer.c.
 */
#ifndef TXO_BROKER_CONSUMER_INTERNAL_H
#define TXO_BROKER_CONSUMER_INTERNAL_H

#include "txo/consumer.h"

/*
 * 0 when h is usable (not NULL, exactly one of h->one and h->batch set), else TXO_EINVAL with err
 * set to
 * "<who>: ..." (who: "nats consumer").
 */
int txo__handler_check(const struct txo_handler *h, const char *who, struct txo_error *err);

/*
 * Runs h on msgs[0..n) (n >= 1): h->batch in one call, or h->one once per message in order.
 * Afterwards results[i] holds msgs[i]'s verdict (0 or a negative TXO_E* code) and errors[i]
 * its reason; errors is initialised here. A batch handler that fails as a whole fails every
 * message with its code ("batch handler: ..."); that code is returned, else 0.
 */
int txo__handler_run(const struct txo_handler *h, const struct txo_inbound_message *msgs, size_t n,
                     int *results, struct txo_error *errors);

/*
 * What one handler run takes for up to n messages: in (filled by the transport) and the
 * verdicts results and errors (filled by txo__handler_run()).
 */
struct txo__handler_batch {
    struct txo_inbound_message *in;
    int *results;
    struct txo_error *errors;
};

/*
 * Allocates b's arrays, zeroed, for n >= 1 messages. False when out of memory; b is released
 * with txo__handler_batch_release() either way.
 */
bool txo__handler_batch_alloc(struct txo__handler_batch *b, size_t n);

/* Frees b's arrays; a zeroed or released batch is a no-op. */
void txo__handler_batch_release(struct txo__handler_batch *b);

/*
 * Folds one settlement's outcome into a poll's: when code < 0 and *first is still 0, *first
 * becomes code and *err (when not NULL) the reason e. The first failure is what the poll
 * returns; later ones were logged where they happened.
 */
void txo__settle_keep_first(int code, const struct txo_error *e, int *first, struct txo_error *err);

/*
 * name followed by suffix, as a new string (txo_free()), or NULL when out of memory: the names
 * a consumer derives from its options ("<queue>.retry", "<stream>.dead", "<prefix>.>").
 */
char *txo__suffixed(const char *name, const char *suffix);

#endif
