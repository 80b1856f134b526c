/*
 * Test support: order-service data for tests (see testorders.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "testorders.h"

void testorders_stock(struct txo_db *db, const char *sku, int32_t qty)
{
    struct txo_error err;
    txo_error_init(&err);
    if (orders_set_inventory(db, sku, qty, &err) != 0)
        fail_msg("setting the stock of %s: %s", sku, err.msg);
}

void testorders_stock_abc(struct txo_db *db, int32_t qty)
{
    static const char *const skus[] = {"SKU-A", "SKU-B", "SKU-C"};
    for (size_t i = 0; i < TXO_ARRAY_LEN(skus); i++)
        testorders_stock(db, skus[i], qty);
}

int64_t testorders_run_saga(struct txo_db *db, int64_t customer_id, const struct order_item *items,
                            size_t n_items, const struct order_faults *faults,
                            const struct txo_saga_opts *opts, enum txo_saga_status want,
                            char saga_id[TXO_SAGA_ID_LEN])
{
    struct txo_error err;
    txo_error_init(&err);
    int64_t order_id = 0;
    if (orders_create_with_saga(db, customer_id, items, n_items, &order_id, saga_id, &err) != 0)
        fail_msg("creating an order with its saga: %s", err.msg);
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    if (orders_run_saga(db, saga_id, faults, opts, &final, &err) != 0)
        fail_msg("running saga %s: %s", saga_id, err.msg);
    assert_int_equal(final, want);
    return order_id;
}

/*
 * testorders_pen_saga with at most compensation_max_tries tries of a compensation (0: the
 * library's default).
 */
static int64_t pen_saga(struct txo_db *db, const struct order_faults *faults,
                        unsigned compensation_max_tries, enum txo_saga_status want,
                        char saga_id[TXO_SAGA_ID_LEN])
{
    struct txo_saga_opts opts;
    txo_saga_opts_init(&opts);
    opts.step_backoff.base_ms = 1;
    opts.step_backoff.max_ms = 1;
    if (compensation_max_tries > 0)
        opts.compensation_max_tries = compensation_max_tries;
    const struct order_item item = {"pen", 1, 250};
    return testorders_run_saga(db, 3, &item, 1, faults, &opts, want, saga_id);
}

int64_t testorders_pen_saga(struct txo_db *db, const struct order_faults *faults,
                            enum txo_saga_status want, char saga_id[TXO_SAGA_ID_LEN])
{
    return pen_saga(db, faults, 0, want, saga_id);
}

int64_t testorders_compensation_failed(struct txo_db *db, char saga_id[TXO_SAGA_ID_LEN])
{
    testorders_stock(db, "pen", 100);
    const struct order_faults faults = {.fail_shipment = true, .fail_refund = true};
    return pen_saga(db, &faults, 1, TXO_SAGA_COMPENSATION_FAILED, saga_id);
}
