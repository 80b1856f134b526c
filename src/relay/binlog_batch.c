#include "core/common.h"

/*
 * One run of the binlog source: the rows the log holds, in commit order, published as the
 * polling relay publishes a claimed batch (its own code: the stream decoded the rows into the
 * claim's columns, txo__relay_load_batch() builds the messages, txo__relay_publish() hands
 * them to the publisher in per-aggregate order, txo__relay_mark_tx() dead-letters), then the
 * position stored. The table is not read, and acknowledged rows are not written: they stay as
 * they were inserted.
 *
 * The difference from a polling cycle is what a transient failure does: the polling relay
 * sends the event back to PENDING with a backoff; here the stream waits. The failed events and
 * those held back behind them (RESULT_DEFERRED) are published again, in order, after a
 * backoff, until the broker takes them; the acknowledged ones are not sent again. A permanent
 * failure is marked FAILED with its dead letter (the one update this source makes to an
 * outbox row) and the events behind it go on.
 *
 * Thread-safety: the source's thread only.
 */

#include "relay/binlog_internal.h"
#include "relay/binlog_sql.h"

struct run_mark {
    struct txo_binlog *b;
    struct mark_ctx mark;
    const struct txo__binlog_pos *pos; /* NULL: a batch before the run's last */
    int64_t high_water;
};

static int run_mark_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct run_mark *m = arg;
    bool writes = m->mark.n_groups > 0 || m->mark.n_unpark > 0 ||
                  (m->mark.relay->n > 0 && !m->mark.acked_unmarked);
    int rc = writes ? txo__relay_mark_tx(tx, &m->mark, err) : 0;
    if (rc < 0 || m->pos == NULL)
        return rc;
    struct txo_param p[] = {
        txo_p_str(m->pos->file),  txo_p_i64((int64_t)m->pos->offset), txo_p_str(m->pos->gtid),
        txo_p_i64(m->high_water), txo_p_str(m->b->source_name),       txo_p_str(m->b->owner),
    };
    struct txo_exec_result res = {0};
    rc = txo_tx_exec(tx, BINLOG_SQL_STORE_POSITION, p, TXO_ARRAY_LEN(p), &res, err);
    if (rc < 0)
        return rc;
    if (res.affected_rows != 1)
        return txo_error_set(err, TXO_ELEASELOST,
                             "binlog source %s: lease lost before storing the position; the "
                             "batch is rolled back and the new holder publishes it again",
                             m->b->source_name);
    return 0;
}

struct renewing {
    struct txo_binlog *b;
    struct txo_error *err; /* a failed renewal's */
};

/* Waits ms, renewing the lease (a txo__relay_wait_fn); false when the source stops or its lease
 * is lost or cannot be renewed. */
static bool wait_renewing(void *arg, int64_t ms)
{
    struct renewing *w = arg;
    struct txo_binlog *b = w->b;
    int64_t until = txo_monotonic_ms() + ms;
    for (;;) {
        int64_t left = until - txo_monotonic_ms();
        if (left <= 0)
            return true;
        int64_t step = b->opts.lease_ms / 3;
        (void)txo__waiter_wait(&b->pause, left < step ? left : step, false);
        if (txo__binlog_stopping(b))
            return false;
        if (txo__binlog_lease(b, w->err) < 0 || !b->active)
            return false;
    }
}

/* Publishes r->msgs[0..r->n) until settled (see the file comment). */
static int publish_until_settled(struct txo_binlog *b, struct txo_error *err)
{
    char what[96];
    snprintf(what, sizeof(what), "binlog source %s", b->source_name);
    struct renewing w = {b, err};
    if (txo__relay_publish_settled(b->relay, &b->opts.retry, what, wait_renewing, &w) == 0)
        return 0;
    if (b->active && !txo__binlog_stopping(b))
        return err != NULL && err->code < 0 ? err->code : TXO_EDB;
    return txo_error_set(err, b->active ? TXO_ECANCELED : TXO_ELEASELOST,
                         "binlog source %s: stopped while the broker failed; the run is "
                         "published again from the stored position",
                         b->source_name);
}

/*
 * Publishes the batch in r->rows (decoded by the stream) and, with the run's last batch,
 * stores the position; the dead letters of a permanent failure go in the same transaction.
 */
static int publish_batch(struct txo_binlog *b, bool last, bool store, struct txo_error *err)
{
    struct txo_relay *r = b->relay;
    txo__relay_load_batch(r);
    struct run_mark m = {.b = b, .pos = last && store ? &b->run_pos : NULL};
    for (size_t i = 0; i < r->n; i++)
        if (r->msgs[i].id > b->high_water)
            b->high_water = r->msgs[i].id; /* stored with the next position */
    m.high_water = b->high_water;
    if (r->n > 0) {
        int rc = publish_until_settled(b, err);
        if (rc < 0)
            return rc;
        txo__relay_mark_prepare(r, &m.mark);
        m.mark.held = true; /* the rows are PENDING: the held statements, no token */
        m.mark.acked_unmarked = !b->marking;       /* and the acknowledged ones stay so */
        m.mark.res.published = m.mark.n_published; /* also when no transaction is needed */
    }
    m.mark.relay = r;
    if (m.mark.n_groups > 0 || m.mark.n_unpark > 0 || m.pos != NULL || (b->marking && r->n > 0)) {
        int rc = txo_db_transact(b->db, TXO_ISO_READ_COMMITTED, run_mark_tx, &m, err);
        if (rc < 0)
            return rc;
        if (m.pos != NULL) {
            b->stored_pos = b->run_pos;
            b->stored_ms = txo_monotonic_ms();
        }
    }
    if (r->n > 0) {
        txo__relay_mark_account(r, &m.mark);
        atomic_fetch_add(&b->published, m.mark.res.published);
        atomic_fetch_add(&b->dead_lettered, m.mark.res.dead_lettered);
        atomic_store(&b->last_published_us, txo_realtime_us());
    }
    return 0;
}

int txo__binlog_publish_run(struct txo_binlog *b, struct txo__binlog_stream *s, bool force,
                            struct txo_error *err)
{
    struct txo_relay *r = b->relay;
    bool store = force || txo_monotonic_ms() - b->stored_ms >= TXO__BINLOG_STORE_MS ||
                 txo__binlog_stream_committed(s) >= b->opts.relay.batch_size;
    int rc = 0;
    do {
        if (txo_monotonic_ms() - b->lease_renewed_ms >= b->opts.lease_ms / 4) {
            rc = txo__binlog_lease(b, err);
            if (rc == 0 && !b->active)
                rc = txo_error_set(err, TXO_ELEASELOST, "binlog source %s: lease lost",
                                   b->source_name);
            if (rc < 0)
                break;
        }
        txo_rows_free(r->rows);
        r->rows = NULL;
        r->n = 0;
        rc = txo__binlog_stream_take(s, b->opts.relay.batch_size, &r->rows, err);
        if (rc == 0)
            rc = publish_batch(b, txo__binlog_stream_committed(s) == 0, store, err);
        txo_rows_free(r->rows);
        r->rows = NULL;
        r->n = 0;
    } while (rc == 0 && txo__binlog_stream_committed(s) > 0);
    if (rc == 0)
        atomic_fetch_add(&b->runs, 1);
    return rc;
}
