/*
 * The order writer: one thread that commits the queued POST /orders requests in groups. See
 * order_writer.h for what a group does and how a failed group falls back.
 *
 * Queue: a singly linked FIFO under mu. A handler links its request (on its own stack) and
 * waits on `done_cv` until the writer marks it done; a request still queued after db_wait_ms is
 * unlinked by its handler and answered 503, while one the writer took is always waited for (its
 * transaction is bounded by the connection's own timeouts), so the writer never touches a
 * request whose handler is gone.
 *
 * Thread-safety: mu guards the queue, every request's taken/done flags and `stopping`; the
 * writer fills a request's answer fields before it sets done under mu, and the handler reads
 * them after it saw done under mu.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "order_writer.h"
#include "txo/tracer.h"
#include "txo/txo.h"

struct order_writer {
    struct order_writer_opts opts;
    struct txo_db_pool *pool;
    struct txo_metric *batch_size; /* NULL without metrics */
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* the writer waits for requests */
    pthread_cond_t done_cv; /* handlers wait for their answers */
    struct order_writer_req *head, *tail;
    bool stopping;
    pthread_t thread;
};

void order_writer_created_body(int64_t order_id, char *out, size_t cap)
{
    snprintf(out, cap, "{\"order_id\":%" PRId64 ",\"status\":\"CREATED\"}", order_id);
}

/* One group in flight (the writer thread's). */
struct group {
    struct order_writer *w;
    struct order_writer_req **reqs;
    size_t n;
    struct order_new *orders; /* the new orders, n_new of them, for reqs[order_of[k]] */
    size_t *order_of;
    size_t *dup_of; /* SIZE_MAX, or the index of the request whose answer this one shares */
    size_t n_new;
    bool key_wait_timeout; /* the keys' insert waited for a key held elsewhere, in vain */
};

static void req_reset(struct order_writer_req *r)
{
    txo_free(r->body);
    r->body = NULL;
    r->status = 0;
    r->order_id = 0;
    r->why[0] = '\0';
    r->outcome = ORDER_WRITER_SINGLE;
}

/* Step 1: the stored rows of the group's keys (txo_idem_lookup_many). Answers the replays and
 * conflicts, sends PROCESSING rows to the single path; the others stay SINGLE with dup_of set
 * to "new". */
static int read_keys(struct txo_tx *tx, struct group *g, bool *fresh, struct txo_error *err)
{
    const char **keys = txo_calloc(g->n, sizeof(*keys));
    struct txo_idem_stored *stored = txo_calloc(g->n, sizeof(*stored));
    int rc;
    if (keys == NULL || stored == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "key lookup of a group of %zu orders", g->n);
        goto out;
    }
    for (size_t i = 0; i < g->n; i++)
        keys[i] = g->reqs[i]->key;
    rc = txo_idem_lookup_many(tx, keys, g->n, stored, err);
    if (rc != 0)
        goto out;
    for (size_t i = 0; i < g->n; i++) {
        struct order_writer_req *r = g->reqs[i];
        struct txo_idem_stored *s = &stored[i];
        fresh[i] = s->row == TXO_IDEM_ROW_ABSENT;
        if (fresh[i])
            continue;
        /* The same decisions as txo_idem_begin()'s, from the same columns. */
        if (strcmp(s->hash, r->hash) != 0) {
            r->outcome = ORDER_WRITER_CONFLICT;
        } else if (s->row == TXO_IDEM_ROW_COMPLETED) {
            r->outcome = ORDER_WRITER_REPLAY;
            r->status = s->status;
            r->body = s->response; /* ours now */
            s->response = NULL;
        } else {
            r->outcome = ORDER_WRITER_SINGLE; /* PROCESSING: wait for it or take it over */
        }
    }
out:
    txo_idem_stored_release(stored, keys != NULL && stored != NULL ? g->n : 0);
    txo_free(stored);
    txo_free(keys);
    return rc;
}

/* Step 4: the keys of the new orders, COMPLETED with their responses. */
static int insert_keys(struct txo_tx *tx, struct group *g, struct txo_error *err)
{
    struct txo_idem_done *rows = txo_calloc(g->n_new, sizeof(*rows));
    if (rows == NULL)
        return txo_error_set(err, TXO_ENOMEM, "key insert of a group of %zu orders", g->n_new);
    for (size_t k = 0; k < g->n_new; k++) {
        struct order_writer_req *r = g->reqs[g->order_of[k]];
        rows[k] = (struct txo_idem_done){
            .key = r->key, .hash = r->hash, .status = r->status, .response_json = r->body};
    }
    int rc = txo_idem_store_completed_many(tx, rows, g->n_new, err);
    if (rc != 0)
        txo_error_wrap(err, "idempotency keys of a group of %zu orders", g->n_new);
    txo_free(rows);
    return rc;
}

static int group_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct group *g = arg;
    struct order_writer *w = g->w;
    bool *fresh = txo_calloc(g->n, sizeof(*fresh));
    int rc;
    g->n_new = 0;
    g->key_wait_timeout = false;
    for (size_t i = 0; i < g->n; i++) {
        req_reset(g->reqs[i]); /* a retried transaction starts over */
        g->dup_of[i] = SIZE_MAX;
    }
    if (fresh == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "group of %zu orders", g->n);
        goto out;
    }
    rc = read_keys(tx, g, fresh, err);
    if (rc != 0)
        goto out;

    /* Step 2: the SKUs of every request with a key not stored yet (in queue order). */
    size_t n_check = 0;
    for (size_t i = 0; i < g->n; i++)
        if (fresh[i]) {
            struct order_new *o = &g->orders[n_check];
            memset(o, 0, sizeof(*o));
            o->customer_id = g->reqs[i]->customer_id;
            o->items = g->reqs[i]->items;
            o->n = g->reqs[i]->n;
            o->trace = g->reqs[i]->trace;
            g->order_of[n_check++] = i;
        }
    int64_t step = 0;
    rc = orders_check_skus_group_tx(tx, g->orders, n_check, &step, err);
    if (rc != 0)
        goto out;

    /* Step 3: in queue order, the first request of a key that can be created takes it. */
    size_t kept = 0;
    for (size_t k = 0; k < n_check; k++) {
        size_t i = g->order_of[k];
        struct order_writer_req *r = g->reqs[i];
        size_t owner = SIZE_MAX;
        for (size_t m = 0; m < kept && owner == SIZE_MAX; m++)
            if (strcmp(g->reqs[g->order_of[m]]->key, r->key) == 0)
                owner = g->order_of[m];
        if (owner != SIZE_MAX) {
            if (strcmp(g->reqs[owner]->hash, r->hash) == 0)
                g->dup_of[i] = owner; /* the same request again: the same answer */
            else
                r->outcome = ORDER_WRITER_CONFLICT;
        } else if (g->orders[k].unknown_sku) {
            r->outcome = ORDER_WRITER_REFUSED; /* as the single path: no key row is kept */
            snprintf(r->why, sizeof(r->why), "%s", g->orders[k].why);
        } else {
            g->orders[kept] = g->orders[k];
            g->order_of[kept++] = i;
        }
    }
    g->n_new = kept;
    if (kept == 0) {
        rc = 0;
        goto out;
    }

    rc = orders_create_group_tx(tx, g->orders, kept, w->opts.async, step, err);
    if (rc != 0)
        goto out;
    for (size_t k = 0; k < kept; k++) {
        struct order_writer_req *r = g->reqs[g->order_of[k]];
        char body[96];
        order_writer_created_body(g->orders[k].order_id, body, sizeof(body));
        r->order_id = g->orders[k].order_id;
        r->status = w->opts.async ? 202 : 201;
        r->body = txo_strdup(body);
        if (r->body == NULL) {
            rc = txo_error_set(err, TXO_ENOMEM, "response");
            goto out;
        }
    }
    rc = insert_keys(tx, g, err);
    g->key_wait_timeout = rc == TXO_ELOCKTIMEOUT;
    if (rc == 0)
        txo_crash_point("api.before_commit");
out:
    txo_free(fresh);
    return rc;
}

/*
 * A deadlock or lock wait timeout in the group is not retried as a group: the single path
 * handles each request's own lock wait (a key held by another transaction is 409 there). A
 * lost connection, and a COMMIT that fails Galera certification, still run the group again.
 */
static const struct txo_tx_opts group_tx_opts = {
    .no_retry = TXO_TX_DEADLOCK | TXO_TX_LOCK_TIMEOUT,
};

/* After COMMIT: the created ones and their duplicates get their answers. */
static void group_answer(struct group *g)
{
    for (size_t k = 0; k < g->n_new; k++)
        g->reqs[g->order_of[k]]->outcome = ORDER_WRITER_CREATED;
    for (size_t i = 0; i < g->n; i++) {
        size_t o = g->dup_of[i];
        if (o == SIZE_MAX)
            continue;
        struct order_writer_req *r = g->reqs[i];
        r->status = g->reqs[o]->status;
        r->body = txo_strdup(g->reqs[o]->body);
        r->outcome = r->body != NULL ? ORDER_WRITER_REPLAY : ORDER_WRITER_SINGLE;
    }
}

/*
 * The group's span: one transaction carried n requests, so it is a span of a trace of its own
 * with a link to each request's span (their OrderCreated events carry those), recorded when
 * one of them is sampled.
 */
static void group_span(const struct group *g, int64_t start_us, int rc)
{
    if (g->w->opts.tracer == NULL)
        return;
    struct txo_span_link *links = txo_calloc(g->n, sizeof(*links));
    size_t n_links = 0;
    bool sampled = false;
    for (size_t i = 0; links != NULL && i < g->n; i++) {
        const struct txo_trace_ctx *t = g->reqs[i]->trace;
        if (t == NULL)
            continue;
        memcpy(links[n_links].trace_id, t->trace_id, 16);
        memcpy(links[n_links++].span_id, t->span_id, 8);
        sampled = sampled || (t->flags & TXO_TRACE_SAMPLED);
    }
    if (sampled) {
        struct txo_span_attr attrs[] = {{.key = "txo.group.requests", .num = (int64_t)g->n},
                                        {.key = "txo.group.created", .num = (int64_t)g->n_new}};
        struct txo_span s = {.name = "orders group write",
                             .kind = TXO_SPAN_INTERNAL,
                             .start_us = start_us,
                             .end_us = txo_realtime_us(),
                             .status = rc,
                             .status_message =
                                 rc != 0 ? "rolled back: the requests go one by one" : NULL,
                             .attrs = attrs,
                             .n_attrs = TXO_ARRAY_LEN(attrs),
                             .links = links,
                             .n_links = n_links};
        txo_trace_new_root(true, &s.ctx);
        txo_tracer_record(g->w->opts.tracer, &s);
    }
    txo_free(links);
}

static void group_run(struct order_writer *w, struct order_writer_req **reqs, size_t n)
{
    int64_t start_us = txo_realtime_us();
    struct group g = {.w = w, .reqs = reqs, .n = n};
    g.orders = txo_calloc(n, sizeof(*g.orders));
    g.order_of = txo_calloc(n, sizeof(*g.order_of));
    g.dup_of = txo_calloc(n, sizeof(*g.dup_of));
    struct txo_error err;
    txo_error_init(&err);
    struct txo_db *db = NULL;
    int rc;
    if (g.orders == NULL || g.order_of == NULL || g.dup_of == NULL) {
        rc = txo_error_set(&err, TXO_ENOMEM, "group of %zu orders", n);
    } else if ((rc = txo_db_pool_get(w->pool, w->opts.db_wait_ms, &db, &err)) != 0) {
        for (size_t i = 0; i < n; i++) {
            req_reset(reqs[i]);
            reqs[i]->outcome = ORDER_WRITER_UNAVAILABLE;
            snprintf(reqs[i]->why, sizeof(reqs[i]->why), "%s", err.msg);
        }
        goto out;
    } else {
        rc = txo_db_transact_opts(db, TXO_ISO_READ_COMMITTED, &group_tx_opts, group_tx, &g, &err);
        txo_db_pool_put(w->pool, db, rc == TXO_ECONNLOST);
    }
    if (rc != 0 && g.key_wait_timeout && n == 1) {
        /* One request whose key another transaction holds: the single path would wait for
         * the same lock as long and answer 409, so it is answered so without a second wait. */
        req_reset(reqs[0]);
        reqs[0]->outcome = ORDER_WRITER_IN_PROGRESS;
        goto out;
    }
    if (rc != 0) {
        TXO_LOG(TXO_LOG_WARN, "api", "order group rolled back, its requests go one by one",
                TXO_KV_U64("size", n), TXO_KV_STR("code", txo_err_name(rc)),
                TXO_KV_STR("err", err.msg));
        for (size_t i = 0; i < n; i++) {
            req_reset(reqs[i]);
            reqs[i]->outcome = ORDER_WRITER_SINGLE;
        }
        goto out;
    }
    group_answer(&g);
    if (g.n_new > 0) {
        txo_crash_point("api.after_commit");
        if (w->opts.on_commit != NULL)
            w->opts.on_commit(w->opts.on_commit_arg);
    }
    if (w->batch_size != NULL)
        txo_metric_observe(w->batch_size, NULL, (double)n);
    TXO_LOG(TXO_LOG_DEBUG, "api", "order group committed", TXO_KV_U64("size", n),
            TXO_KV_U64("created", g.n_new));
out:
    group_span(&g, start_us, rc);
    txo_free(g.orders);
    txo_free(g.order_of);
    txo_free(g.dup_of);
}

static void *writer_main(void *arg)
{
    struct order_writer *w = arg;
    struct order_writer_req **reqs = txo_calloc(w->opts.cap, sizeof(*reqs));
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stopping && w->head == NULL)
            pthread_cond_wait(&w->work_cv, &w->mu);
        if (w->stopping || reqs == NULL)
            break;
        size_t n = 0;
        while (w->head != NULL && n < w->opts.cap) {
            struct order_writer_req *r = w->head;
            w->head = r->next;
            r->next = NULL;
            r->taken = true;
            reqs[n++] = r;
        }
        if (w->head == NULL)
            w->tail = NULL;
        pthread_mutex_unlock(&w->mu);
        group_run(w, reqs, n);
        pthread_mutex_lock(&w->mu);
        for (size_t i = 0; i < n; i++)
            reqs[i]->done = true;
        pthread_cond_broadcast(&w->done_cv);
    }
    /* Stopping (or no memory for a group): whatever is still queued answers 503. */
    for (struct order_writer_req *r = w->head; r != NULL; r = r->next) {
        r->outcome = ORDER_WRITER_UNAVAILABLE;
        snprintf(r->why, sizeof(r->why), "%s",
                 reqs == NULL ? "out of memory" : "the service is shutting down");
        r->taken = true;
        r->done = true;
    }
    w->head = w->tail = NULL;
    w->stopping = true; /* also when reqs could not be allocated: later submits answer 503 */
    pthread_cond_broadcast(&w->done_cv);
    pthread_mutex_unlock(&w->mu);
    txo_free(reqs);
    return NULL;
}

int order_writer_new(const struct order_writer_opts *opts, struct txo_db_pool *pool,
                     struct order_writer **out, struct txo_error *err)
{
    if (opts->cap < 2)
        return txo_error_set(err, TXO_EINVAL, "order writer: a group needs a cap >= 2, got %u",
                             opts->cap);
    struct order_writer *w = txo_calloc(1, sizeof(*w));
    if (w == NULL)
        return txo_error_set(err, TXO_ENOMEM, "order writer");
    w->opts = *opts;
    w->pool = pool;
    if (opts->metrics != NULL) {
        static const double buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
        w->batch_size =
            txo_metrics_register(opts->metrics, TXO_METRIC_HISTOGRAM, "txo_order_batch_size",
                                 "POST /orders requests per group transaction of the order writer.",
                                 0, NULL, buckets, TXO_ARRAY_LEN(buckets), err);
        if (w->batch_size == NULL) {
            txo_free(w);
            return err->code;
        }
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->work_cv, NULL);
    pthread_cond_init(&w->done_cv, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        pthread_cond_destroy(&w->work_cv);
        pthread_cond_destroy(&w->done_cv);
        pthread_mutex_destroy(&w->mu);
        txo_free(w);
        return txo_error_set(err, TXO_ENOMEM, "order writer: cannot start its thread");
    }
    *out = w;
    return 0;
}

void order_writer_submit(struct order_writer *w, struct order_writer_req *r)
{
    r->next = NULL;
    r->taken = false;
    r->done = false;
    r->body = NULL;
    r->outcome = ORDER_WRITER_UNAVAILABLE;
    r->why[0] = '\0';
    int64_t wait_ms = w->opts.db_wait_ms > 0 ? w->opts.db_wait_ms : 1;
    struct timespec until;
    txo_monotonic_deadline(wait_ms, &until);
    pthread_mutex_lock(&w->mu);
    if (w->stopping) {
        pthread_mutex_unlock(&w->mu);
        snprintf(r->why, sizeof(r->why), "the service is shutting down");
        return;
    }
    if (w->tail != NULL)
        w->tail->next = r;
    else
        w->head = r;
    w->tail = r;
    pthread_cond_signal(&w->work_cv);
    while (!r->done) {
        int e = pthread_cond_timedwait(&w->done_cv, &w->mu, &until);
        if (e == ETIMEDOUT && !r->taken && !r->done) {
            /* Still queued after the wait a pooled connection gets: unlink it, 503. */
            struct order_writer_req *prev = NULL;
            for (struct order_writer_req *p = w->head; p != NULL; prev = p, p = p->next)
                if (p == r) {
                    if (prev != NULL)
                        prev->next = r->next;
                    else
                        w->head = r->next;
                    if (w->tail == r)
                        w->tail = prev;
                    break;
                }
            snprintf(r->why, sizeof(r->why), "the order writer is busy: waited %" PRId64 " ms",
                     wait_ms);
            break;
        }
    }
    pthread_mutex_unlock(&w->mu);
}

void order_writer_free(struct order_writer *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_cond_signal(&w->work_cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->work_cv);
    pthread_cond_destroy(&w->done_cv);
    pthread_mutex_destroy(&w->mu);
    txo_free(w);
}
