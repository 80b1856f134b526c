/*
 * Test support: order-service data that tests of the API, the admin pages and the CLI start
 * from: stock for a SKU, and an order whose CreateOrderSaga was run to its end in this process
 * (with the in-process payment and shipment stand-ins and the faults a test injects). Every
 * helper fails the current cmocka test on error. Not thread-safe.
 */
#ifndef TXO_TESTORDERS_H
#define TXO_TESTORDERS_H

#include <stddef.h>
#include <stdint.h>

#include "order_saga.h"
#include "orders.h"

/* Sets the stock of sku to qty available (orders_set_inventory). */
void testorders_stock(struct txo_db *db, const char *sku, int32_t qty);

/* The catalogue of the API tests: SKU-A, SKU-B and SKU-C, qty available of each. */
void testorders_stock_abc(struct txo_db *db, int32_t qty);

/*
 * Creates an order of customer_id for items with its saga, runs the saga with faults and opts
 * (either may be NULL) and fails the test unless it ends in want. Returns the order id; saga_id
 * receives the saga's.
 */
int64_t testorders_run_saga(struct txo_db *db, int64_t customer_id, const struct order_item *items,
                            size_t n_items, const struct order_faults *faults,
                            const struct txo_saga_opts *opts, enum txo_saga_status want,
                            char saga_id[TXO_SAGA_ID_LEN]);

/*
 * An order of customer 3 for one pen at 250 cents with its saga, run with faults (may be NULL)
 * and a step backoff of 1 ms; the test fails unless the saga ends in want. Returns the order
 * id; saga_id receives the saga's. The pens must be in stock unless faults make it fail first.
 */
int64_t testorders_pen_saga(struct txo_db *db, const struct order_faults *faults,
                            enum txo_saga_status want, char saga_id[TXO_SAGA_ID_LEN]);

/*
 * testorders_pen_saga (stock of 100 pens set first) whose shipment is refused and whose refund
 * then fails: COMPENSATION_FAILED after its one try, so no worker retries it behind the test's
 * back. Returns the order id; saga_id receives the saga's.
 */
int64_t testorders_compensation_failed(struct txo_db *db, char saga_id[TXO_SAGA_ID_LEN]);

#endif
