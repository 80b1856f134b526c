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

#endif
