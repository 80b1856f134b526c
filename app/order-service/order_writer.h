/*
 * The order writer: group commit of POST /orders (api.c runs it when --order-batch > 1).
 *
 * Handlers check, parse and hash a request as before, then order_writer_submit() it and wait.
 * One writer thread takes everything queued (at most `cap` requests; no timer: a group forms
 * while the previous one commits, so at low load a group is one request) and runs ONE READ
 * COMMITTED transaction for it, on a connection borrowed from the API's pool for the group:
 *   1. one SELECT of the group's existing idempotency keys (txo_idem_lookup_many): a COMPLETED
 *      key with the same hash is answered with its stored response, another hash with 422; a
 *      PROCESSING row (a stale or foreign writer) sends that request to the single path;
 *   2. one SELECT of the SKUs of the remaining orders (orders_check_skus_group_tx): an order
 *      naming an unknown SKU is refused (422) before anything is written;
 *   3. inside the group, a second request with a key the group already takes is the same
 *      request (answered with the first one's response) or, with another body, 422;
 *   4. multi-row INSERTs of the orders, their items, their OrderCreated events
 *      (txo_outbox_append_many; in async mode one StartOrderSaga command each;
 *      orders_create_group_tx) and the keys, COMPLETED with their stored responses
 *      (txo_idem_store_completed_many); the tables of the library's modules are written only
 *      through their APIs; crash point "api.before_commit"; COMMIT; "api.after_commit".
 * Then every handler is answered. When the group's transaction fails for any reason (1062: a
 * key raced by another instance, a deadlock, a lost connection, ...), it is rolled back and each
 * of its requests goes through the single-request path (txo_idem_begin and friends), in its
 * handler's thread with a pooled connection, so the answers never depend on the grouping.
 *
 * Thread-safety: order_writer_submit() from any number of threads; new/free from one.
 */
#ifndef TXO_ORDER_WRITER_H
#define TXO_ORDER_WRITER_H

#include <stdbool.h>
#include <stdint.h>

#include "orders.h"
#include "txo/db.h"
#include "txo/err.h"
#include "txo/idempotency.h"

struct txo_metrics;

/* The body of a new order's response (status 201, or 202 in async mode): shared with the
 * single-request path so both store the same bytes. */
void order_writer_created_body(int64_t order_id, char *out, size_t cap);

enum order_writer_outcome {
    ORDER_WRITER_CREATED,     /* status, body: the new order (and what the key stores) */
    ORDER_WRITER_REPLAY,      /* status, body: the stored response of the key */
    ORDER_WRITER_CONFLICT,    /* the key was used with another body: 422 */
    ORDER_WRITER_REFUSED,     /* why: an unknown SKU, 422 validation_failed */
    ORDER_WRITER_IN_PROGRESS, /* a group of one waited for its key held elsewhere: 409 */
    ORDER_WRITER_SINGLE,      /* run the single-request path for it (the group failed, ...) */
    ORDER_WRITER_UNAVAILABLE, /* why: not taken in time, no connection, shutting down: 503 */
};

/* One request. The caller fills the inputs, which stay borrowed until submit returns. */
struct order_writer_req {
    const char *key;
    const char *hash; /* TXO_IDEM_HASH_LEN */
    int64_t customer_id;
    const struct order_item *items;
    size_t n;
    const struct txo_trace_ctx *trace; /* the request's, for its OrderCreated; NULL: none */
    /* the answer */
    enum order_writer_outcome outcome;
    int status;
    char *body; /* CREATED, REPLAY: owned by the caller after submit (txo_free) */
    int64_t order_id;
    char why[sizeof(((struct txo_error *)0)->msg)];
    /* the writer's */
    struct order_writer_req *next;
    bool taken;
    bool done;
};

struct order_writer_opts {
    unsigned cap;                 /* requests per group, >= 2 */
    bool async;                   /* 202 + StartOrderSaga */
    int64_t db_wait_ms;           /* for the pooled connection; and how long a request may stay
                                   * queued before it answers 503 */
    struct txo_metrics *metrics;  /* txo_order_batch_size; NULL: none */
    struct txo_tracer *tracer;    /* a span per group, linking its requests'; NULL: none */
    void (*on_commit)(void *arg); /* after a group that created orders committed */
    void *on_commit_arg;
};

struct order_writer;

/* Starts the writer thread over pool (borrowed). Errors: TXO_ENOMEM, TXO_EINVAL. */
TXO_MUST_CHECK int order_writer_new(const struct order_writer_opts *opts, struct txo_db_pool *pool,
                                    struct order_writer **out, struct txo_error *err);

/* Queues r and waits for its answer (r->outcome ...). Never fails otherwise. */
void order_writer_submit(struct order_writer *w, struct order_writer_req *r);

/* Stops the thread after its group; requests still queued answer UNAVAILABLE. NULL: no-op. */
void order_writer_free(struct order_writer *w);

#endif
