/*
 * Private to the worker: what it does with the inbox's order verdicts (txo/inbox.h,
 * txo_inbox_check_order) of the events it consumes (src/worker/order_watch.c):
 *   - counts gaps and older-after-newer events in txo_inbox_out_of_order_total, by aggregate
 *     type and kind (never by aggregate id: that label would grow without bound);
 *   - logs the first one of each aggregate, once (a bounded set of aggregates remembered);
 *   - for a handler with hold_out_of_order_ms, holds an event found after a gap: it is
 *     delivered again until its predecessor was handled, for at most that long from the first
 *     hold, then refused for good (parked) with the reason.
 *
 * Thread-safety: every function may be called from any thread (one mutex inside).
 */
#ifndef TXO_WORKER_ORDER_WATCH_H
#define TXO_WORKER_ORDER_WATCH_H

#include "txo/consumer.h"
#include "txo/inbox.h"
#include "txo/metrics.h"

struct txo__order_watch;

/* A watcher registering its counter in reg (NULL: none). NULL when out of memory. */
struct txo__order_watch *txo__order_watch_new(struct txo_metrics *reg, struct txo_error *err);
void txo__order_watch_free(struct txo__order_watch *ow);

/* The position of ev for txo_inbox_check_order(). */
struct txo_inbox_position txo__order_position(const struct txo_event *ev);

/* Counts and logs ev's verdict o, once its handler's transaction committed. */
void txo__order_seen(struct txo__order_watch *ow, const struct txo_event *ev,
                     enum txo_inbox_order o);

/*
 * Whether ev, found after a gap (o == TXO_INBOX_GAP), is held for a handler that holds for
 * hold_ms (0: never): returns 0 to handle it now (no gap, or not held), else a code with err
 * set, which the caller returns after rolling back: TXO_EUNAVAILABLE while the hold lasts (the
 * transport delivers it again), TXO_EBUSINESS once it has lasted hold_ms (parked for good).
 */
int txo__order_hold(struct txo__order_watch *ow, const struct txo_event *ev, enum txo_inbox_order o,
                    unsigned hold_ms, struct txo_error *err);

#endif
