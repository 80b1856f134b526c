/*
 * The reference order service, built only on the public txo API.
 *
 * What it does:
 *   - orders_create_tx() writes an order, its items and the OrderCreated outbox event in the
 *     caller's transaction: the three commit together or not at all (transactional outbox).
 *   - orders_cancel_tx() lets the customer cancel a CREATED order (optimistic locking).
 *   - the order's saga, CreateOrderSaga, and the helpers that start and drive it are declared
 *     in order_saga.h: this header knows nothing of them, so the order rows and the saga that
 *     moves them do not depend on each other both ways.
 *
 * Invariants kept:
 *   - every order status change has its outbox event in the same transaction
 *     (OrderCreated, ShipmentCreated with CONFIRMED, OrderCancelled with CANCELLED);
 *   - available + reserved of a SKU is only moved between the two columns, never created or
 *     lost, and never goes negative (the schema's CHECKs enforce it too);
 *   - at most one payment and one shipment per order (unique keys, steps re-run safely);
 *   - inventory rows are locked in ascending SKU order, in every transaction, so concurrent
 *     reservations cannot deadlock on each other.
 *
 * Order states (orders.status, enum order_status below): CREATED -> CONFIRMED (CreateShipment)
 * | CANCELLED (the saga failed or was compensated, or the customer cancelled). Both targets are
 * terminal; every statement that moves an order is listed in ORDERS_MOVES (orders_sql.h), and
 * a test checks that list against order_status_can_move().
 *
 * Who uses what: the HTTP API calls orders_create_tx() (orders_create_async_tx() with --async)
 * and orders_cancel_tx(); the worker's handlers (worker.h) start the saga from the OrderCreated
 * event's payload (or, with --async, from the StartOrderSaga command's); tests, benchmarks and
 * the demo also use orders_create().
 *
 * Thread-safety: every function uses only the db/tx it is given (one thread per db).
 */
#ifndef TXO_ORDERS_H
#define TXO_ORDERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/db.h"
#include "txo/trace.h"
#include "txo/err.h"
#include "txo/saga.h"

/* The order state machine (orders.status). */
enum order_status {
    ORDER_CREATED = 0, /* accepted, its saga running      -> CONFIRMED, CANCELLED */
    ORDER_CONFIRMED,   /* stock, payment and shipment done (terminal) */
    ORDER_CANCELLED,   /* the saga aborted or the customer cancelled (terminal) */
};
#define ORDER_STATUS_COUNT 3

/* "CREATED", "CONFIRMED", "CANCELLED" (the column values). */
const char *order_status_name(enum order_status s);
/* Parses a column value. Returns 0 or TXO_EINVAL. */
int order_status_parse(const char *name, enum order_status *out);
/* True when the state machine above allows from -> to. */
bool order_status_can_move(enum order_status from, enum order_status to);

/*
 * The order service's schema (app/order-service/migrations: orders, order_items, inventory,
 * inventory_reservations, payments, shipments), a migration set of its own next to the
 * library's (txo/db.h). orders_migrate() applies the library's set, then this one: what
 * `txo migrate` does for the reference service. Same errors as txo_migrate_set(); *applied and
 * *total (may be NULL) count both sets.
 */
const struct txo_migration_set *orders_migrations(void);
TXO_MUST_CHECK int orders_migrate(struct txo_db *db, unsigned *applied, unsigned *total,
                                  struct txo_error *err);

/* Limits enforced by orders_validate(). */
#define ORDER_MAX_ITEMS       100
#define ORDER_SKU_MAX         64 /* bytes, as inventory.sku VARCHAR(64) */
#define ORDER_MAX_QTY         1000000
#define ORDER_MAX_PRICE_CENTS INT64_C(1000000000000) /* 10^12 */

/* The saga type stored in saga_instances.saga_type. */
#define ORDER_SAGA_TYPE "CreateOrderSaga"

/* One line of an order. The sku is borrowed by every function that takes items. */
struct order_item {
    const char *sku;     /* 1..ORDER_SKU_MAX bytes */
    int32_t qty;         /* 1..ORDER_MAX_QTY */
    int64_t price_cents; /* 0..ORDER_MAX_PRICE_CENTS, per unit */
};

/*
 * Checks an order before anything is written: customer_id > 0, 1..ORDER_MAX_ITEMS items, each
 * with a sku of 1..ORDER_SKU_MAX bytes, qty in 1..ORDER_MAX_QTY and price_cents in
 * 0..ORDER_MAX_PRICE_CENTS, and a total (sum of qty * price_cents) that fits in int64.
 * *total_cents (may be NULL) receives the total on success.
 * Errors: TXO_EINVAL with a message naming the item index and field ("items[2].qty must be
 * 1..1000000, got 0"). Pure; never touches the database.
 */
TXO_MUST_CHECK int orders_validate(int64_t customer_id, const struct order_item *items, size_t n,
                                   int64_t *total_cents, struct txo_error *err);

/*
 * Creates an order inside the caller's transaction tx: validates it,
 * checks that every sku exists in `inventory`, inserts the `orders` row (CREATED, total),
 * one `order_items` row per item and the OrderCreated outbox event (aggregate "order", key
 * "order:<id>:created", payload {"order_id","customer_id","items":[{"sku","qty",
 * "price_cents"}],"total_cents","created_at"}). Nothing is committed here: it all commits
 * or rolls back with tx. *order_id receives the new id on success.
 * Errors: TXO_EINVAL (validation, or "unknown sku ..." before anything is written),
 * TXO_ENOMEM, DB errors.
 * tx should be READ COMMITTED (as orders_create's): the SKU check is a consistent read there;
 * at REPEATABLE READ or above it would hold shared locks on those inventory rows until tx ends
 * (still correct, but reservations wait for it). orders_create_one_tx() without a trace
 * context: 4 statements.
 */
TXO_MUST_CHECK int orders_create_tx(struct txo_tx *tx, int64_t customer_id,
                                    const struct order_item *items, size_t n, int64_t *order_id,
                                    struct txo_error *err);

/*
 * orders_create_tx() in its own READ COMMITTED transaction (retried whole on deadlock, lock
 * wait timeout or lost connection). Same errors.
 */
TXO_MUST_CHECK int orders_create(struct txo_db *db, int64_t customer_id,
                                 const struct order_item *items, size_t n, int64_t *order_id,
                                 struct txo_error *err);

/*
 * The order as compact JSON for GET /orders/{id}: {"order_id","customer_id","status",
 * "total_cents","version","created_at","updated_at","items":[{"sku","qty","price_cents"}],
 * "saga":null | {"saga_id","saga_type","correlation_id","status","owner","steps":[...]}}.
 * *out is freed with txo_free(); *version (may be NULL) receives the order's version (the
 * API's ETag). Errors: TXO_ENOTFOUND, TXO_ENOMEM, DB errors.
 */
TXO_MUST_CHECK int orders_get_json(struct txo_db *db, int64_t order_id, char **out,
                                   int64_t *version, struct txo_error *err);

/*
 * The dashboard's search for orders (a struct txo_admin_finder's find, arg unused): query must
 * be an order id in decimal; the order as a dashboard record (txo/admin.h): its title, status,
 * fields, its items as a table, and its saga, read as orders_get_json() reads it. *json is
 * freed with txo_free(). Errors: TXO_ENOTFOUND (not a positive integer, or no such order),
 * TXO_ENOMEM, DB errors.
 */
TXO_MUST_CHECK int orders_find_record(void *arg, struct txo_db *db, const char *query, char **json,
                                      struct txo_error *err);

/*
 * The command_queue type the async API enqueues and the worker runs; its payload is the
 * order's saga payload (the OrderCreated payload).
 */
#define ORDERS_START_SAGA_COMMAND "StartOrderSaga"

/*
 * The async API's order: orders_create_tx() whose OrderCreated payload also says
 * "saga_start":"command", and a StartOrderSaga command carrying the saga payload, both in tx.
 * The worker then starts the saga from the command only (the event does not start one).
 * Same errors as orders_create_tx().
 */
TXO_MUST_CHECK int orders_create_async_tx(struct txo_tx *tx, int64_t customer_id,
                                          const struct order_item *items, size_t n,
                                          int64_t *order_id, struct txo_error *err);

/*
 * Creating several orders in one transaction (the API's group commit, order_writer.h). The
 * caller fills customer_id, items and n of each (already orders_validate()d); the functions
 * fill the rest.
 */
struct order_new {
    int64_t customer_id;
    const struct order_item *items; /* borrowed */
    size_t n;
    const struct txo_trace_ctx *trace; /* the request's; NULL: none (borrowed) */
    int64_t order_id;                  /* orders_create_group_tx(): the new id */
    bool unknown_sku;                  /* orders_check_skus_group_tx(): a SKU is not in inventory */
    char why[160]; /* then: "unknown sku items[<i>].sku=<sku>" as orders_create_tx says */
};

/*
 * One SELECT over every SKU of the n orders: sets unknown_sku (and why) of each order naming a
 * SKU that inventory does not have, as orders_create_tx() would refuse it. Writes nothing.
 * *autoinc_step receives the session's @@auto_increment_increment (read by the same statement),
 * which orders_create_group_tx() needs; 0 when no SKU is known at all.
 * Errors: TXO_ENOMEM, DB errors. READ COMMITTED (a consistent read, no lock).
 */
TXO_MUST_CHECK int orders_check_skus_group_tx(struct txo_tx *tx, struct order_new *orders, size_t n,
                                              int64_t *autoinc_step, struct txo_error *err);

/*
 * One order, o, as a group of one (the only builder of an order's rows and event is
 * orders_create_group_tx()): orders_validate(), then orders_check_skus_group_tx() (an unknown SKU
 * is TXO_EINVAL with its why, nothing written), then orders_create_group_tx(); o->order_id
 * receives the new id. orders_create_tx() and orders_create_async_tx() are this without a
 * trace context. Cost: 4 statements (SKU check, order, items, event; + the command with
 * by_command).
 */
TXO_MUST_CHECK int orders_create_one_tx(struct txo_tx *tx, struct order_new *o, bool by_command,
                                        struct txo_error *err);

/*
 * orders_create_tx() (orders_create_async_tx() with by_command) for n orders whose SKUs
 * orders_check_skus_group_tx() found, in 3 statements whatever n (4 with by_command: one
 * txo_cmdq_enqueue() per order): one multi-row INSERT of the orders, one of all their items,
 * one of their OrderCreated events, each payload byte-for-byte what orders_create_tx() writes.
 * The ids of one multi-row INSERT are consecutive by autoinc_step (InnoDB allocates a "simple
 * insert"'s ids in one go, in every innodb_autoinc_lock_mode); affected rows are checked.
 * Errors: TXO_EINVAL (validation), TXO_ENOMEM, TXO_EDB (row counts), DB errors (1062 ...).
 */
TXO_MUST_CHECK int orders_create_group_tx(struct txo_tx *tx, struct order_new *orders, size_t n,
                                          bool by_command, int64_t autoinc_step,
                                          struct txo_error *err);

/*
 * The customer cancels order_id, which they read at expected_version (GET /orders/{id}), in
 * the caller's transaction: CREATED -> CANCELLED, version + 1, and an OrderCancelled event
 * (key "order:<id>:cancelled"). Optimistic locking: the change applies only if
 * nobody changed the order since that read; the order's saga, if it is running, then finds
 * the order CANCELLED when it tries to confirm it, fails CreateShipment and compensates the
 * steps it did (its own final hook writes no second OrderCancelled).
 * *new_version (may be NULL) receives the version after the change.
 * Errors: TXO_ENOTFOUND, TXO_ECONFLICT (the version moved: read again), TXO_ESTATE (not
 * CREATED at that version: already CONFIRMED or CANCELLED), DB errors.
 */
TXO_MUST_CHECK int orders_cancel_tx(struct txo_tx *tx, int64_t order_id, int64_t expected_version,
                                    int64_t *new_version, struct txo_error *err);

/* The stock of one SKU, as `txo up --stock` and the demo write it. The sku is borrowed. */
struct order_stock {
    const char *sku;   /* 1..ORDER_SKU_MAX bytes of UTF-8 (inventory.sku, utf8mb4) */
    int32_t available; /* 0..INT32_MAX (inventory.available INT, CHECK >= 0) */
};

/*
 * Checks s against the limits of the inventory table, so that nothing the database would
 * refuse is ever sent to it. Errors: TXO_EINVAL with a message naming the limit ("sku must be
 * 1..64 bytes, got 65"). Pure; never touches the database.
 */
TXO_MUST_CHECK int orders_stock_check(const struct order_stock *s, struct txo_error *err);

/*
 * orders_stock_check() for each entry of list[0..n), and no SKU twice. Errors: TXO_EINVAL with
 * a message naming the entry (1-based) and its SKU ("stock entry 2 (sku "..."): sku must
 * be 1..64 bytes, got 65"). Pure.
 */
TXO_MUST_CHECK int orders_stock_check_list(const struct order_stock *list, size_t n,
                                           struct txo_error *err);

/*
 * Sets the stock of a SKU (creating the row): available = `available`, reserved = 0. For the
 * demo, tests and benchmarks only: it ignores reservations that may still exist.
 * Errors: TXO_EINVAL (orders_stock_check()), DB errors.
 */
TXO_MUST_CHECK int orders_set_inventory(struct txo_db *db, const char *sku, int32_t available,
                                        struct txo_error *err);

/* Creates the SKU with `available` units unless it exists (then nothing changes): safe on a
 * live database. Errors: TXO_EINVAL (orders_stock_check()), DB errors. */
TXO_MUST_CHECK int orders_ensure_inventory(struct txo_db *db, const char *sku, int32_t available,
                                           struct txo_error *err);

/*
 * orders_ensure_inventory() for every entry of list[0..n) in one READ COMMITTED transaction
 * (retried whole on deadlock, lock wait timeout or lost connection), the rows written in
 * ascending SKU order: either every missing SKU is created or none is. The list is checked
 * first (orders_stock_check_list()), and nothing is sent to the database when it fails. For
 * `txo up --stock`. Errors: TXO_EINVAL, TXO_ENOMEM, DB errors.
 */
TXO_MUST_CHECK int orders_ensure_inventory_list(struct txo_db *db, const struct order_stock *list,
                                                size_t n, struct txo_error *err);

/*
 * The order service's invariants on a live database (`txo audit`): for the orders created in
 * the last window_s seconds (at most max_orders, newest first), every order has its
 * OrderCreated event; once older than settle_s, a CREATED one has a saga (a worker consumes),
 * a CONFIRMED one has a COMPLETED saga, exactly one CHARGED payment and one CREATED shipment and
 * its ShipmentCreated event, a CANCELLED one whose saga ended has no CHARGED payment nor
 * CREATED shipment left and an OrderCancelled event; per SKU, reserved equals what the
 * RESERVED reservations hold and nothing is negative; no saga has gone settle_s without a live
 * owner, and none was given up (COMPENSATION_FAILED with no retry). Each violation is passed to
 * report(report_arg, check, order_id or 0, detail). Consistent reads only: it runs beside the
 * daemons. Choose window_s below the outbox retention (PUBLISHED events are purged after it).
 * Errors: TXO_EINVAL, DB errors (the report so far stays in *out).
 */
struct orders_audit_opts {
    unsigned window_s;   /* default 1 day */
    unsigned settle_s;   /* default 60 */
    unsigned max_orders; /* default 10000 */
    void (*report)(void *arg, const char *check, int64_t order_id, const char *detail);
    void *report_arg;
};

struct orders_audit_report {
    uint64_t orders;     /* orders checked */
    uint64_t violations; /* violations reported */
};

void orders_audit_opts_init(struct orders_audit_opts *opts);
TXO_MUST_CHECK int orders_audit(struct txo_db *db, const struct orders_audit_opts *opts,
                                struct orders_audit_report *out, struct txo_error *err);

/*
 * Internal to the service (order_json.c), shared by orders.c and order_saga*.c; not for
 * callers. Both return a compact JSON document to free with txo_free(), or NULL with err set
 * (TXO_ENOMEM, TXO_EINVAL).
 */

/* {"order_id","customer_id","items":[...],"total_cents"[,"created_at"][,"saga_start":
 * "command"]}; created_at may be NULL to leave it out (the SagaPayload); by_command adds
 * "saga_start" (the async API's OrderCreated). */
char *orders__json_order(int64_t order_id, int64_t customer_id, const struct order_item *items,
                         size_t n, int64_t total_cents, const char *created_at, bool by_command,
                         struct txo_error *err);

/* {"saga_id","order_id"[,"items":[{"sku","qty"}...]][,"amount_cents"][,"reason"]}: items is
 * left out when NULL, amount_cents when negative, reason when NULL. */
char *orders__json_saga_event(const char *saga_id, int64_t order_id, const struct order_item *items,
                              size_t n, int64_t amount_cents, const char *reason,
                              struct txo_error *err);

#endif
