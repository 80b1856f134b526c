/*
 * Every SQL statement of the order service, one named macro each, so a reader sees all the
 * queries the service runs in one place. Each is a prepared statement with bound parameters
 * (txo_tx_exec/txo_tx_query); none is ever built from values. The only SQL assembled at run
 * time is the IN list of ORDERS_SQL_GROUP_KNOWN_SKUS_*, whose placeholder count comes from
 * txo_sql_in_list(), and the
 * VALUES lists of the ORDERS_SQL_GROUP_* inserts (txo_sql_values_rows()). Lists of rows travel as
 * one bound JSON document unpacked by JSON_TABLE (MySQL 8.0.4+, MariaDB 10.6+).
 *
 * Above each: the index it uses, the rows it locks, the isolation it assumes. Service
 * transactions run at READ COMMITTED (orders_create, orders_start_saga; the saga engine's step
 * transactions too): locking reads lock only the rows they return, there are no gap locks, and
 * the SELECT part of an INSERT ... SELECT is a consistent read, so the only lock ordering that
 * matters is the one on inventory rows (ascending SKU everywhere).
 *
 * Lock order across the service, when one transaction takes several:
 *   ReserveStock: inventory (sku) -> inventory_reservations (saga_id, sku), SKU by SKU in
 *   ascending order (the reservation row is the saga's own: nobody else locks it);
 *   ReleaseStock: inventory_reservations (saga_id, *) -> inventory (sku), ascending SKU;
 *   payments / shipments (order_id) -> orders (id).
 * Shared rows (inventory) are thus always locked in ascending SKU order.
 */
#ifndef TXO_ORDERS_SQL_H
#define TXO_ORDERS_SQL_H

/* ---- orders.c: creating an order and its saga ---- */

/*
 * An order and its items in one round trip: one row per item in insertion order (the order's
 * columns repeated), or none when there is no such order. orders PRIMARY, order_items
 * idx_order_items_order (order_id). Non-locking read (READ COMMITTED): the saga payload is a
 * snapshot of an order whose items never change after creation.
 */
#define ORDERS_SQL_SELECT_ORDER_ITEMS                                                              \
    "SELECT o.customer_id, o.total_cents, i.sku, i.qty, i.price_cents "                            \
    "FROM orders o JOIN order_items i ON i.order_id = o.id WHERE o.id = ? ORDER BY i.id"
enum order_items_col {
    ORDER_ITEMS_COL_CUSTOMER,
    ORDER_ITEMS_COL_TOTAL,
    ORDER_ITEMS_COL_SKU,
    ORDER_ITEMS_COL_QTY,
    ORDER_ITEMS_COL_PRICE,
};

/* inventory PRIMARY (sku). Locks that row (X). Demo/tests only: resets reserved to 0. */
#define ORDERS_SQL_SET_INVENTORY                                                                   \
    "INSERT INTO inventory (sku, available, reserved) VALUES (?, ?, 0) "                           \
    "ON DUPLICATE KEY UPDATE available = VALUES(available), reserved = 0"

/* inventory PRIMARY. Creates the SKU with `available` units; an existing row is left alone
 * (the no-op update), so its stock and reservations stay consistent. */
#define ORDERS_SQL_ENSURE_INVENTORY                                                                \
    "INSERT INTO inventory (sku, available, reserved) VALUES (?, ?, 0) "                           \
    "ON DUPLICATE KEY UPDATE sku = sku"

/* ---- orders.c: a group of orders in one transaction (the API's order writer) ---- */

/*
 * The known SKUs among those of a group (one order is a group of one): BEFORE + "(?,?,...)"
 * (txo_sql_in_list(), the last SKU repeated), with the session's auto-increment step on every
 * row (the ids of a multi-row INSERT are first + i * step). inventory PRIMARY (sku), point
 * lookups; consistent read at READ COMMITTED, no lock (at REPEATABLE READ it would take shared
 * locks on those inventory rows until commit, which ReserveStock would then wait for); a SKU
 * deleted afterwards is caught by ReserveStock.
 */
#define ORDERS_SQL_GROUP_KNOWN_SKUS_BEFORE                                                         \
    "SELECT sku, @@session.auto_increment_increment FROM inventory WHERE sku IN "

/*
 * n order rows: ORDERS_SQL_GROUP_INSERT_ORDERS + n x ORDERS_SQL_GROUP_ORDER_ROW
 * (txo_sql_values_rows). Params per row: customer_id, total_cents. A "simple insert": InnoDB
 * allocates its n ids at once, consecutive by the auto-increment step. orders PRIMARY; locks
 * the new rows only.
 */
#define ORDERS_SQL_GROUP_INSERT_ORDERS                                                             \
    "INSERT INTO orders (customer_id, status, total_cents) VALUES "
#define ORDERS_SQL_GROUP_ORDER_ROW "(?, 'CREATED', ?)"

/*
 * Every item of the group's orders in one statement. Param: a JSON array of the orders'
 * OrderCreated payloads ([{"order_id","items":[{"sku","qty","price_cents"}...]}...]); rows in
 * payload order, items in their order (ids ascending). order_items
 * PRIMARY (auto increment); the FK check takes a shared lock on each order row this
 * transaction just inserted. Any isolation.
 */
#define ORDERS_SQL_GROUP_INSERT_ITEMS                                                              \
    "INSERT INTO order_items (order_id, sku, qty, price_cents) "                                   \
    "SELECT j.order_id, j.sku, j.qty, j.price_cents FROM JSON_TABLE(?, '$[*]' COLUMNS ("           \
    "o FOR ORDINALITY, order_id BIGINT PATH '$.order_id', NESTED PATH '$.items[*]' COLUMNS ("      \
    "ord FOR ORDINALITY, sku VARCHAR(64) PATH '$.sku', qty INT PATH '$.qty', "                     \
    "price_cents BIGINT PATH '$.price_cents'))) AS j ORDER BY j.o, j.ord"

/* The group's OrderCreated events go through txo_outbox_append_many() and its idempotency keys
 * through txo_idem_lookup_many()/txo_idem_store_completed_many(): those tables belong to the
 * library's modules, this file holds the SQL of the service's own tables only. */

/* ---- order_saga_stock.c: ReserveStock / ReleaseStock ---- */

/* inventory_reservations PRIMARY prefix (saga_id). Locks every reservation of the saga (X),
 * returned in ascending SKU order, which is then the order the inventory rows are locked in. */
#define ORDERS_SQL_RESERVATIONS_LOCK                                                               \
    "SELECT sku, qty, status FROM inventory_reservations WHERE saga_id = ? "                       \
    "ORDER BY sku FOR UPDATE"
enum reservations_col { RESERVATIONS_COL_SKU, RESERVATIONS_COL_QTY, RESERVATIONS_COL_STATUS };

/* inventory PRIMARY. Locks the SKU's row (X). `reserved >= ?` keeps reserved non-negative;
 * the caller requires affected_rows == 1. */
#define ORDERS_SQL_INVENTORY_RELEASE                                                               \
    "UPDATE inventory SET available = available + ?, reserved = reserved - ? "                     \
    "WHERE sku = ? AND reserved >= ?"

/* inventory_reservations PRIMARY; the row is already locked by ORDERS_SQL_RESERVATIONS_LOCK. */
#define ORDERS_SQL_RESERVATION_RELEASE                                                             \
    "UPDATE inventory_reservations SET status = 'RELEASED' "                                       \
    "WHERE saga_id = ? AND sku = ? AND status = 'RESERVED'"

/* ---- order_saga_payment.c: ChargePayment / RefundPayment ---- */

/* RefundPayment: payments uq_payment_order. Locks the rows (X). `status = 'CHARGED'` makes a
 * re-run a no-op. Followed by the IN list of order ids. */
#define ORDERS_SQL_PAYMENT_REFUND_MANY                                                             \
    "UPDATE payments FORCE INDEX (uq_payment_order) SET status = 'REFUNDED' "                      \
    "WHERE status = 'CHARGED' AND order_id IN "

/* ---- order_saga_shipment.c: CreateShipment / CancelShipment ---- */

/* CancelShipment: shipments uq_shipment_order. Locks the rows (X); a re-run changes nothing.
 * Followed by the IN list of order ids. */
#define ORDERS_SQL_SHIPMENT_CANCEL_MANY                                                            \
    "UPDATE shipments FORCE INDEX (uq_shipment_order) SET status = 'CANCELLED' "                   \
    "WHERE status = 'CREATED' AND order_id IN "

/* ---- order_saga_*.c: the set-based statements of the steps ----
 *
 * Each is the text before an IN list (txo_sql_in_list) or the VALUES rows
 * (txo_sql_values_rows). Every locking one names its index (FORCE INDEX) so that it locks the
 * batch's rows only, and all are single-table statements.
 */

/* ReserveStock batch: every SKU of the batch, locked (X) in ascending SKU order (the order
 * every inventory transaction locks in). Index: PRIMARY (sku). */
#define ORDERS_SQL_INVENTORY_LOCK_MANY                                                             \
    "SELECT sku, available FROM inventory FORCE INDEX (PRIMARY) WHERE sku IN "
#define ORDERS_SQL_INVENTORY_LOCK_MANY_END " ORDER BY sku FOR UPDATE"

/* ReserveStock batch: the reservations the sagas made already, with their status (a re-run,
 * judged by the step's rule). Index: PRIMARY (saga_id, sku) prefix.
 * Locks: none (consistent read; the saga leases keep other workers away from these sagas). */
#define ORDERS_SQL_RESERVATIONS_MANY                                                               \
    "SELECT saga_id, status FROM inventory_reservations FORCE INDEX (PRIMARY) WHERE saga_id IN "

/* ReserveStock batch: the SKUs' new counts in one statement; the rows are locked by
 * ORDERS_SQL_INVENTORY_LOCK_MANY, so the amounts computed from it hold. Built as
 * UPDATE_BEGIN + n x CASE_ROW + MIDDLE + n x CASE_ROW + END + IN list; params per CASE_ROW:
 * sku, qty. Index: PRIMARY. */
#define ORDERS_SQL_INVENTORY_RESERVE_MANY_BEGIN                                                    \
    "UPDATE inventory FORCE INDEX (PRIMARY) SET available = available - CASE sku"
#define ORDERS_SQL_INVENTORY_RESERVE_MANY_CASE   " WHEN ? THEN ?"
#define ORDERS_SQL_INVENTORY_RESERVE_MANY_MIDDLE " END, reserved = reserved + CASE sku"
#define ORDERS_SQL_INVENTORY_RESERVE_MANY_END    " END WHERE sku IN "

/* ReserveStock batch: the reservations. Params per row: saga_id, sku, qty. Locks: the new
 * rows (and a shared lock per inventory row for the FK check, held X already). */
#define ORDERS_SQL_RESERVATION_INSERT_MANY                                                         \
    "INSERT INTO inventory_reservations (saga_id, sku, qty, status) VALUES "
#define ORDERS_SQL_RESERVATION_INSERT_ROW "(?, ?, ?, 'RESERVED')"

/* ChargePayment / CreateShipment batch: the orders' payments / shipments that exist already,
 * with their status (a re-run, judged by the step's rule). Index:
 * uq_payment_order / uq_shipment_order. Locks: none. */
#define ORDERS_SQL_PAYMENTS_MANY                                                                   \
    "SELECT order_id, status FROM payments FORCE INDEX (uq_payment_order) WHERE order_id IN "
#define ORDERS_SQL_SHIPMENTS_MANY                                                                  \
    "SELECT order_id, status FROM shipments FORCE INDEX (uq_shipment_order) WHERE order_id IN "

/* ChargePayment batch: one payment per order. Params per row: order_id, amount_cents. A
 * duplicate (raced) fails the batch with TXO_EDUPLICATE: its sagas then run alone. */
#define ORDERS_SQL_PAYMENT_INSERT_MANY                                                             \
    "INSERT INTO payments (order_id, amount_cents, status) VALUES "
#define ORDERS_SQL_PAYMENT_INSERT_ROW "(?, ?, 'CHARGED')"

/* The guard of ChargePayment / CreateShipment with remote services: which orders are still
 * CREATED before they are charged or shipped. Index: PRIMARY. Locks: none (consistent read:
 * a cancel that commits after it is caught by the step's local part). */
#define ORDERS_SQL_ORDER_STATUS_MANY                                                               \
    "SELECT id, status FROM orders FORCE INDEX (PRIMARY) WHERE id IN "

/* CreateShipment batch: the orders, locked (X), to see which are still CREATED. Index:
 * PRIMARY. */
#define ORDERS_SQL_ORDER_LOCK_MANY                                                                 \
    "SELECT id, status FROM orders FORCE INDEX (PRIMARY) WHERE id IN "
#define ORDERS_SQL_ORDER_LOCK_MANY_END " FOR UPDATE"

/* CreateShipment batch: one shipment per order. Params per row: order_id. */
#define ORDERS_SQL_SHIPMENT_INSERT_MANY "INSERT INTO shipments (order_id, status) VALUES "
#define ORDERS_SQL_SHIPMENT_INSERT_ROW  "(?, 'CREATED')"

/* CreateShipment batch: the orders locked above (all CREATED) confirmed. Index: PRIMARY.
 * affected rows must be the batch's count. */
#define ORDERS_SQL_ORDER_CONFIRM_MANY                                                              \
    "UPDATE orders FORCE INDEX (PRIMARY) SET status = 'CONFIRMED', version = version + 1 "         \
    "WHERE status = 'CREATED' AND id IN "

/* ---- order_saga.c, order_saga_shipment.c: order status changes ---- */

/* orders PRIMARY. Locks the order row (X). Only CREATED moves (see ORDERS_SQL_ORDER_CONFIRM). */
#define ORDERS_SQL_ORDER_CANCEL                                                                    \
    "UPDATE orders SET status = 'CANCELLED', version = version + 1 "                               \
    "WHERE id = ? AND status = 'CREATED'"

/* orders PRIMARY. Locks the order row (X) to read its latest committed status after an
 * UPDATE above changed nothing. */
#define ORDERS_SQL_ORDER_STATUS_LOCK "SELECT status FROM orders WHERE id = ? FOR UPDATE"

/* ---- order_query.c: reading an order back (GET /orders/{id}) ---- */

/* orders PRIMARY. Consistent read, no lock. Columns: enum get_order_col. */
#define ORDERS_SQL_GET_ORDER                                                                       \
    "SELECT customer_id, status, total_cents, version, "                                           \
    "DATE_FORMAT(created_at, '%Y-%m-%dT%H:%i:%s.%fZ'), "                                           \
    "DATE_FORMAT(updated_at, '%Y-%m-%dT%H:%i:%s.%fZ') FROM orders WHERE id = ?"
enum get_order_col {
    GET_ORDER_COL_CUSTOMER_ID = 0,
    GET_ORDER_COL_STATUS,
    GET_ORDER_COL_TOTAL_CENTS,
    GET_ORDER_COL_VERSION,
    GET_ORDER_COL_CREATED_AT, /* RFC 3339, UTC */
    GET_ORDER_COL_UPDATED_AT, /* RFC 3339, UTC */
};

/* order_items idx_order_items_order (order_id). Consistent read, no lock. Columns: enum
 * get_items_col. */
#define ORDERS_SQL_GET_ITEMS                                                                       \
    "SELECT sku, qty, price_cents FROM order_items WHERE order_id = ? ORDER BY id"
enum get_items_col {
    GET_ITEMS_COL_SKU = 0,
    GET_ITEMS_COL_QTY,
    GET_ITEMS_COL_PRICE_CENTS,
};

/* ---- orders.c: cancel by the customer (optimistic locking on orders.version) ---- */

/* orders PRIMARY. Locks the order row (X) only when it is still CREATED at the version the
 * client saw: 0 rows means another writer (the saga confirming it, another cancel) got there
 * first, and ORDERS_SQL_ORDER_VERSION tells which. */
#define ORDERS_SQL_ORDER_CANCEL_AT_VERSION                                                         \
    "UPDATE orders SET status = 'CANCELLED', version = version + 1 "                               \
    "WHERE id = ? AND version = ? AND status = 'CREATED'"

/* orders PRIMARY. The order's current status and version (consistent read). */
#define ORDERS_SQL_ORDER_VERSION "SELECT status, version FROM orders WHERE id = ?"
enum order_version_col { ORDER_VERSION_COL_STATUS, ORDER_VERSION_COL_VERSION };

/* ---- order_audit.c: checking the invariants on a live database (all consistent reads) ---- */

/* Orders created in the last ? seconds, newest first, at most ?. orders PRIMARY walked
 * backwards; created_at checked on the row (a bounded window: the audit's cost is its limit). */
#define ORDERS_SQL_AUDIT_ORDERS                                                                    \
    "SELECT id, status, TIMESTAMPDIFF(SECOND, created_at, NOW(6)) FROM orders "                    \
    "WHERE created_at >= NOW(6) - INTERVAL ? SECOND ORDER BY id DESC LIMIT ?"
enum audit_orders_col { AUDIT_ORDER_ID, AUDIT_ORDER_STATUS, AUDIT_ORDER_AGE };

/* Does the outbox hold the event with this idempotency key? uq_outbox_idempotency_key. */
#define ORDERS_SQL_AUDIT_EVENT "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key = ?"

/* An order's payments and shipments by status: uq_payment_order, uq_shipment_order. */
#define ORDERS_SQL_AUDIT_EFFECTS                                                                   \
    "SELECT (SELECT COUNT(*) FROM payments WHERE order_id = ? AND status = 'CHARGED'), "           \
    "(SELECT COUNT(*) FROM shipments WHERE order_id = ? AND status = 'CREATED')"
enum audit_effects_col { AUDIT_EFFECTS_CHARGED, AUDIT_EFFECTS_SHIPPED };

/* SKUs whose reserved count differs from their RESERVED reservations, or negative stock. A
 * scan of inventory with a per-SKU aggregate of inventory_reservations (no index on sku there
 * but its FK's: idx on sku). */
#define ORDERS_SQL_AUDIT_STOCK                                                                     \
    "SELECT i.sku, i.available, i.reserved, COALESCE(SUM(r.qty), 0) FROM inventory i "             \
    "LEFT JOIN inventory_reservations r ON r.sku = i.sku AND r.status = 'RESERVED' "               \
    "GROUP BY i.sku, i.available, i.reserved "                                                     \
    "HAVING i.reserved <> COALESCE(SUM(r.qty), 0) OR i.available < 0 OR i.reserved < 0"
enum audit_stock_col {
    AUDIT_STOCK_SKU,
    AUDIT_STOCK_AVAILABLE,
    AUDIT_STOCK_RESERVED,
    AUDIT_STOCK_HELD
};

/*
 * Every statement that moves an order's status, with its move: X(statement, from, to). A test
 * walks this list: each statement's SET and WHERE must say exactly these states, and each move
 * must be allowed by order_status_can_move().
 */
#define ORDERS_MOVES(X)                                                                            \
    X(ORDERS_SQL_ORDER_CONFIRM_MANY, CREATED, CONFIRMED)                                           \
    X(ORDERS_SQL_ORDER_CANCEL, CREATED, CANCELLED)                                                 \
    X(ORDERS_SQL_ORDER_CANCEL_AT_VERSION, CREATED, CANCELLED)

#endif
