#include "core/common.h"

/*
 * Dead letters: listing (one by one, or grouped by their event), counting and replaying the rows
 * the relay writes into dead_letter_events when an outbox event used up its publish attempts.
 * include/txo/dlq.h has the contract; dlq_sql.h every statement with its index and locks.
 *
 * A replay is one READ COMMITTED transaction that locks the dead letter, then its source outbox
 * row, checks that the row is FAILED (the only state a replay may leave; the outbox state
 * machine allows FAILED -> PENDING, and tests/unit/test_sql_moves.c checks that
 * DLQ_SQL_REQUEUE_SOURCE makes exactly that move), moves it back to PENDING and records
 * the replay on the dead letter. Anything unexpected rolls the whole replay back. A skip is the
 * same transaction with the other move out of FAILED: the row becomes SKIPPED
 * (DLQ_SQL_SKIP_SOURCE), the aggregate it parked is freed (DLQ_SQL_UNPARK_SOURCE), the
 * aggregate's next event is linked past it (unlink_skipped) and the dead letter records the
 * skip, so the relay's ordered claim takes the next event of the
 * aggregate. A replay leaves the aggregate parked by the event: it is claimed again, and its
 * publish frees the aggregate.
 *
 * Memory: a list is returned as one array whose strings are separate allocations, all freed by
 * txo_dead_letters_free().
 *
 * Thread-safety: no shared state; each call uses only the db it is given.
 */

#include "core/text.h"
#include "dlq/dlq_sql.h"
#include "txo/dlq.h"

/* Columns of DLQ_SQL_LIST. */
enum list_col {
    COL_ID = 0,
    COL_SOURCE_EVENT_ID,
    COL_EVENT_TYPE,
    COL_PAYLOAD,
    COL_ERROR,
    COL_CREATED_AT,
    COL_REPLAYED_AT,
    COL_REPLAY_COUNT,
    COL_SKIPPED_AT,
};

static void dead_letter_release(struct txo_dead_letter *d)
{
    txo_free(d->event_type);
    txo_free(d->payload);
    txo_free(d->error);
    txo_free(d->replayed_at);
    txo_free(d->skipped_at);
}

void txo_dead_letters_free(struct txo_dead_letter *dl, size_t n)
{
    if (dl == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        dead_letter_release(&dl[i]);
    txo_free(dl);
}

static char *dup_or_empty(const char *s)
{
    return txo_strdup(s != NULL ? s : "");
}

/* Row i's DATETIME column col as RFC 3339 text into *out (txo_free), left NULL for a NULL
 * column. False when out of memory. */
static bool dup_time(const struct txo_rows *rows, size_t i, size_t col, char **out)
{
    if (txo_rows_is_null(rows, i, col))
        return true;
    char at[TXO_RFC3339_LEN];
    *out = txo_strdup(txo__text_rfc3339(txo_rows_str(rows, i, col, NULL), at));
    return *out != NULL;
}

/* Copies row i into entry, a struct txo_dead_letter. Returns 0 or TXO_ENOMEM (it may be half
 * filled; free it anyway). */
static int copy_dead_letter(const struct txo_rows *rows, size_t i, void *entry)
{
    struct txo_dead_letter *d = entry;
    d->id = txo_rows_i64(rows, i, COL_ID);
    d->source_event_id = txo_rows_i64(rows, i, COL_SOURCE_EVENT_ID); /* 0 for NULL */
    d->event_type = dup_or_empty(txo_rows_str(rows, i, COL_EVENT_TYPE, NULL));
    d->payload = dup_or_empty(txo_rows_str(rows, i, COL_PAYLOAD, NULL));
    d->error = dup_or_empty(txo_rows_str(rows, i, COL_ERROR, NULL));
    txo__text_rfc3339(txo_rows_str(rows, i, COL_CREATED_AT, NULL), d->created_at);
    int64_t count = txo_rows_i64(rows, i, COL_REPLAY_COUNT);
    d->replay_count = count > 0 && count <= INT32_MAX ? (unsigned)count : 0;
    if (d->event_type == NULL || d->payload == NULL || d->error == NULL)
        return TXO_ENOMEM;
    if (!dup_time(rows, i, COL_REPLAYED_AT, &d->replayed_at) ||
        !dup_time(rows, i, COL_SKIPPED_AT, &d->skipped_at))
        return TXO_ENOMEM;
    return 0;
}

/* A listing of dead letters, one by one or by event: what one page of it reads. */
struct listing {
    const char *what; /* for messages: "dead letters" */
    const char *sql;  /* takes (after_id, limit) */
    size_t size;      /* of one entry */
    int (*copy)(const struct txo_rows *rows, size_t i, void *entry);
    void (*free)(void *list, size_t n);
};

/*
 * One page of a listing: the entries after after_id, at most limit of them, into *out (an
 * array of *n entries that the listing's free releases), written only on success.
 */
static int list_page(struct txo_db *db, const struct listing *l, int64_t after_id, size_t limit,
                     void **out, size_t *n, struct txo_error *err)
{
    TXO_ASSERT(db != NULL && out != NULL && n != NULL);
    if (limit < 1 || limit > TXO_DLQ_LIST_MAX)
        return txo_error_set(err, TXO_EINVAL, "%s: limit must be 1..%d, got %zu", l->what,
                             TXO_DLQ_LIST_MAX, limit);
    struct txo_rows *rows = NULL;
    char *list = NULL;
    size_t count = 0;
    struct txo_param params[] = {txo_p_i64(after_id), txo_p_i64((int64_t)limit)};
    int rc = txo_db_query(db, l->sql, params, TXO_ARRAY_LEN(params), &rows, err);
    if (rc < 0) {
        txo_error_wrap(err, "%s: list after id %" PRId64, l->what, after_id);
        goto out;
    }
    count = txo_rows_count(rows);
    if (count > 0) {
        list = txo_calloc(count, l->size);
        if (list == NULL) {
            rc = txo_error_set(err, TXO_ENOMEM, "%s: out of memory", l->what);
            goto out;
        }
    }
    for (size_t i = 0; i < count; i++) {
        if (l->copy(rows, i, list + i * l->size) < 0) {
            rc = txo_error_set(err, TXO_ENOMEM, "%s: out of memory", l->what);
            goto out;
        }
    }
    *out = list;
    *n = count;
    list = NULL;
out:
    l->free(list, count);
    txo_rows_free(rows);
    return rc;
}

static void free_dead_letters(void *list, size_t n)
{
    txo_dead_letters_free(list, n);
}

int txo_dlq_list(struct txo_db *db, int64_t after_id, size_t limit, struct txo_dead_letter **out,
                 size_t *n, struct txo_error *err)
{
    static const struct listing letters = {"dead letters", DLQ_SQL_LIST,
                                           sizeof(struct txo_dead_letter), copy_dead_letter,
                                           free_dead_letters};
    void *list = NULL;
    int rc = list_page(db, &letters, after_id, limit, &list, n, err);
    if (rc == 0)
        *out = list;
    return rc;
}

/* Columns of DLQ_SQL_LIST_EVENTS after those of DLQ_SQL_LIST. */
enum event_col {
    COL_LETTERS = COL_SKIPPED_AT + 1,
    COL_REPLAYS,
    COL_LAST_REPLAYED_AT,
    COL_EVENT_STATUS,
};

void txo_dead_events_free(struct txo_dead_event *ev, size_t n)
{
    if (ev == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        dead_letter_release(&ev[i].last);
        txo_free(ev[i].last_replayed_at);
    }
    txo_free(ev);
}

static unsigned count_col(const struct txo_rows *rows, size_t i, size_t col)
{
    int64_t v = txo_rows_is_null(rows, i, col) ? 0 : txo_rows_i64(rows, i, col);
    return v > 0 && v <= INT32_MAX ? (unsigned)v : 0;
}

/* Copies row i into entry, a struct txo_dead_event. Returns 0 or TXO_ENOMEM (it may be half
 * filled; free it anyway). */
static int copy_dead_event(const struct txo_rows *rows, size_t i, void *entry)
{
    struct txo_dead_event *e = entry;
    int rc = copy_dead_letter(rows, i, &e->last);
    if (rc != 0)
        return rc;
    e->letters = count_col(rows, i, COL_LETTERS);
    e->replays = count_col(rows, i, COL_REPLAYS);
    if (!txo_rows_is_null(rows, i, COL_EVENT_STATUS))
        snprintf(e->status, sizeof(e->status), "%s", txo_rows_str(rows, i, COL_EVENT_STATUS, NULL));
    return dup_time(rows, i, COL_LAST_REPLAYED_AT, &e->last_replayed_at) ? 0 : TXO_ENOMEM;
}

static void free_dead_events(void *list, size_t n)
{
    txo_dead_events_free(list, n);
}

int txo_dlq_list_events(struct txo_db *db, int64_t after_id, size_t limit,
                        struct txo_dead_event **out, size_t *n, struct txo_error *err)
{
    static const struct listing events = {"dead events", DLQ_SQL_LIST_EVENTS,
                                          sizeof(struct txo_dead_event), copy_dead_event,
                                          free_dead_events};
    void *list = NULL;
    int rc = list_page(db, &events, after_id, limit, &list, n, err);
    if (rc == 0)
        *out = list;
    return rc;
}

int txo_dlq_count(struct txo_db *db, uint64_t *total, uint64_t *unreplayed, struct txo_error *err)
{
    TXO_ASSERT(db != NULL);
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, DLQ_SQL_COUNT, NULL, 0, &rows, err);
    if (rc < 0) {
        txo_error_wrap(err, "dead letters: count");
        return rc;
    }
    bool any = txo_rows_count(rows) > 0;
    if (total != NULL)
        *total = any ? (uint64_t)txo_rows_i64(rows, 0, 0) : 0;
    if (unreplayed != NULL)
        *unreplayed = any ? (uint64_t)txo_rows_i64(rows, 0, 1) : 0;
    txo_rows_free(rows);
    return 0;
}

/* Columns of DLQ_SQL_LOCK_SOURCE. */
enum source_col {
    SRC_STATUS = 0,
    SRC_AGGREGATE_TYPE,
    SRC_AGGREGATE_ID,
    SRC_SEQUENCE,
    SRC_PREV_SEQUENCE,
};

/*
 * A skipped event is never published, so what followed it now follows what it followed: the
 * aggregate's next event (already appended, or the next one appended) carries the skipped
 * event's prev_sequence, and a consumer sees a skip, not a gap. src is the locked source row.
 */
static int unlink_skipped(struct txo_tx *tx, const struct txo_rows *src, struct txo_error *err)
{
    int64_t seq = txo_rows_i64(src, 0, SRC_SEQUENCE);
    int64_t prev =
        txo_rows_is_null(src, 0, SRC_PREV_SEQUENCE) ? 0 : txo_rows_i64(src, 0, SRC_PREV_SEQUENCE);
    struct txo_param agg[] = {
        txo_p_str(txo_rows_str(src, 0, SRC_AGGREGATE_TYPE, NULL)),
        txo_p_str(txo_rows_str(src, 0, SRC_AGGREGATE_ID, NULL)),
    };
    struct txo_rows *counter = NULL;
    int rc = txo_tx_query(tx, DLQ_SQL_LOCK_AGGREGATE, agg, 2, &counter, err);
    if (rc < 0)
        return rc;
    bool last = txo_rows_count(counter) > 0 && txo_rows_i64(counter, 0, 0) == seq;
    txo_rows_free(counter);
    if (last) {
        struct txo_param p[] = {txo_p_i64(prev), agg[0], agg[1]};
        return txo_tx_exec(tx, DLQ_SQL_UNLINK_LAST, p, TXO_ARRAY_LEN(p), NULL, err);
    }
    struct txo_param p[] = {txo_p_i64(prev), agg[0], agg[1], txo_p_i64(seq)};
    return txo_tx_exec(tx, DLQ_SQL_UNLINK_BEFORE_NEXT, p, TXO_ARRAY_LEN(p), NULL, err);
}

struct replay_ctx {
    int64_t dead_letter_id;
    bool skip;        /* skip the event instead of replaying it */
    const char *verb; /* "replay" or "skip", for messages */
    int64_t event_id; /* the source outbox row, once found */
};

static int replay_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct replay_ctx *r = arg;
    struct txo_rows *rows = NULL;
    r->event_id = 0;

    struct txo_param dl = txo_p_i64(r->dead_letter_id);
    int rc = txo_tx_query(tx, DLQ_SQL_LOCK_DEAD_LETTER, &dl, 1, &rows, err);
    if (rc < 0)
        goto out;
    if (txo_rows_count(rows) == 0) {
        rc = txo_error_set(err, TXO_ENOTFOUND, "no dead letter %" PRId64, r->dead_letter_id);
        goto out;
    }
    if (txo_rows_is_null(rows, 0, 0)) {
        rc = txo_error_set(err, TXO_ENOTFOUND,
                           "dead letter %" PRId64 " names no source outbox event "
                           "(source_event_id is NULL): nothing to replay",
                           r->dead_letter_id);
        goto out;
    }
    r->event_id = txo_rows_i64(rows, 0, 0);
    txo_rows_free(rows);
    rows = NULL;

    struct txo_param ev = txo_p_i64(r->event_id);
    rc = txo_tx_query(tx, DLQ_SQL_LOCK_SOURCE, &ev, 1, &rows, err);
    if (rc < 0)
        goto out;
    if (txo_rows_count(rows) == 0) {
        rc = txo_error_set(err, TXO_ENOTFOUND,
                           "dead letter %" PRId64 ": its outbox event %" PRId64
                           " no longer exists (deleted by retention or by hand); nothing to %s",
                           r->dead_letter_id, r->event_id, r->verb);
        goto out;
    }
    const char *status = txo_rows_str(rows, 0, SRC_STATUS, NULL);
    enum txo_outbox_status s;
    if (txo_outbox_status_parse(status, &s) < 0 || s != TXO_OUTBOX_FAILED) {
        rc = txo_error_set(err, TXO_ESTATE,
                           "dead letter %" PRId64 ": its outbox event %" PRId64
                           " is %s, not FAILED (replayed or skipped already?)",
                           r->dead_letter_id, r->event_id, status != NULL ? status : "NULL");
        goto out;
    }

    struct txo_exec_result res;
    rc = txo_tx_exec(tx, r->skip ? DLQ_SQL_SKIP_SOURCE : DLQ_SQL_REQUEUE_SOURCE, &ev, 1, &res, err);
    if (rc < 0)
        goto out;
    if (res.affected_rows != 1) {
        /* Cannot happen: the row is locked and was FAILED just now. */
        rc =
            txo_error_set(err, TXO_ESTATE,
                          "dead letter %" PRId64 ": outbox event %" PRId64 " changed during the %s",
                          r->dead_letter_id, r->event_id, r->verb);
        goto out;
    }
    if (r->skip) {
        rc = txo_tx_exec(tx, DLQ_SQL_UNPARK_SOURCE, &ev, 1, NULL, err);
        if (rc == 0 && !txo_rows_is_null(rows, 0, SRC_SEQUENCE))
            rc = unlink_skipped(tx, rows, err);
        if (rc < 0)
            goto out;
    }
    rc = txo_tx_exec(tx, r->skip ? DLQ_SQL_MARK_SKIPPED : DLQ_SQL_MARK_REPLAYED, &dl, 1, NULL, err);
out:
    txo_rows_free(rows);
    return rc;
}

int txo_dlq_replay(struct txo_db *db, int64_t dead_letter_id, struct txo_error *err)
{
    TXO_ASSERT(db != NULL);
    struct replay_ctx r = {.dead_letter_id = dead_letter_id, .verb = "replay"};
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, replay_tx, &r, err);
    if (rc < 0) {
        txo_error_wrap(err, "dead letters: replay");
        return rc;
    }
    TXO_LOG(TXO_LOG_INFO, "dlq", "replayed dead letter, its event is PENDING again",
            TXO_KV_I64("dead_letter_id", dead_letter_id), TXO_KV_I64("event_id", r.event_id));
    return 0;
}

int txo_dlq_skip(struct txo_db *db, int64_t dead_letter_id, struct txo_error *err)
{
    TXO_ASSERT(db != NULL);
    struct replay_ctx r = {.dead_letter_id = dead_letter_id, .skip = true, .verb = "skip"};
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, replay_tx, &r, err);
    if (rc < 0) {
        txo_error_wrap(err, "dead letters: skip");
        return rc;
    }
    TXO_LOG(TXO_LOG_INFO, "dlq",
            "skipped dead letter, its event is SKIPPED and its aggregate goes on",
            TXO_KV_I64("dead_letter_id", dead_letter_id), TXO_KV_I64("event_id", r.event_id));
    return 0;
}
