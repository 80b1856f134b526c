#include "core/common.h"

/*
 * The parked aggregates, for operators (`txo stats`, GET /outbox/parked, the relay's gauge):
 * txo_relay_list_parked() and txo_relay_count_parked(). They read outbox_parked, which the
 * ordered relays' marks write (relay_sql.h, RELAY_SQL_LIST_PARKED). Any thread; db only.
 */

#include "relay/relay_sql.h"
#include "txo/metrics.h"
#include "txo/relay.h"

/* Columns of RELAY_SQL_LIST_PARKED. */
enum parked_col {
    PCOL_AGGREGATE_TYPE = 0,
    PCOL_AGGREGATE_ID,
    PCOL_ID,
    PCOL_STATUS,
    PCOL_ATTEMPTS,
    PCOL_LAST_ERROR,
    PCOL_WAITING,
};

/* src into a fixed buffer, cut on a character boundary. */
static void copy_cut(char *dst, size_t cap, const char *src)
{
    size_t len = src != NULL ? strlen(src) : 0;
    len = txo_utf8_cut(src != NULL ? src : "", len, cap - 1);
    if (len > 0)
        memcpy(dst, src, len);
    dst[len] = '\0';
}

int txo_relay_list_parked(struct txo_db *db, struct txo_relay_parked *out, size_t cap, size_t *n,
                          struct txo_error *err)
{
    TXO_ASSERT(db != NULL && out != NULL && n != NULL);
    if (cap == 0)
        return txo_error_set(err, TXO_EINVAL, "relay: list of parked aggregates with no room");
    struct txo_rows *rows = NULL;
    struct txo_param limit = txo_p_i64((int64_t)cap);
    int rc = txo_db_query(db, RELAY_SQL_LIST_PARKED, &limit, 1, &rows, err);
    if (rc < 0) {
        txo_error_wrap(err, "relay: listing parked aggregates");
        return rc;
    }
    size_t count = txo_rows_count(rows);
    if (count > cap)
        count = cap;
    for (size_t i = 0; i < count; i++) {
        struct txo_relay_parked *p = &out[i];
        memset(p, 0, sizeof(*p));
        copy_cut(p->aggregate_type, sizeof(p->aggregate_type),
                 txo_rows_str(rows, i, PCOL_AGGREGATE_TYPE, NULL));
        copy_cut(p->aggregate_id, sizeof(p->aggregate_id),
                 txo_rows_str(rows, i, PCOL_AGGREGATE_ID, NULL));
        p->event_id = txo_rows_i64(rows, i, PCOL_ID);
        enum txo_outbox_status st = TXO_OUTBOX_PENDING;
        if (txo_outbox_status_parse(txo_rows_str(rows, i, PCOL_STATUS, NULL), &st) < 0)
            st = TXO_OUTBOX_PENDING; /* the query picks PENDING and FAILED rows only */
        p->status = st;
        int64_t attempts = txo_rows_i64(rows, i, PCOL_ATTEMPTS);
        p->attempts = attempts > 0 && attempts <= INT32_MAX ? (unsigned)attempts : 0;
        copy_cut(p->last_error, sizeof(p->last_error),
                 txo_rows_str(rows, i, PCOL_LAST_ERROR, NULL));
        int64_t waiting = txo_rows_i64(rows, i, PCOL_WAITING);
        p->waiting = waiting > 0 ? (uint64_t)waiting : 0;
    }
    txo_rows_free(rows);
    *n = count;
    return 0;
}

int txo_relay_count_parked(struct txo_db *db, uint64_t cap, uint64_t *n, struct txo_error *err)
{
    TXO_ASSERT(db != NULL && n != NULL);
    if (cap == 0 || cap > INT64_MAX)
        return txo_error_set(err, TXO_EINVAL, "relay: counting parked aggregates needs a cap");
    struct txo_param limit = txo_p_i64((int64_t)cap);
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, RELAY_SQL_COUNT_PARKED, &limit, 1, &rows, err);
    if (rc < 0) {
        txo_error_wrap(err, "relay: counting parked aggregates");
        return rc;
    }
    int64_t count = txo_rows_count(rows) > 0 ? txo_rows_i64(rows, 0, 0) : 0;
    txo_rows_free(rows);
    *n = count > 0 ? (uint64_t)count : 0;
    return 0;
}

/* Parked aggregates counted per scrape at most (the count reads the due rows). */
#define PARKED_CAP 1000

static const struct txo_metric_desc parked_family = {
    TXO_METRIC_GAUGE, "txo_outbox_parked_aggregates",
    "Aggregates held back by a failed event (relays with --ordering aggregate): its later events "
    "wait until it is published, replayed or skipped (txo stats lists them); counted up to 1000.",
    0, NULL};

int txo_relay_metrics_register(struct txo_metrics *reg, struct txo_error *err)
{
    return txo_metrics_register_table(reg, &parked_family, 1, NULL, err);
}

int txo_relay_metrics_collect(struct txo_metrics *reg, struct txo_db *db, struct txo_error *err)
{
    struct txo_metric *parked;
    uint64_t n = 0;
    int rc = txo_metrics_register_table(reg, &parked_family, 1, &parked, err);
    if (rc == 0)
        rc = txo_relay_count_parked(db, PARKED_CAP, &n, err);
    if (rc == 0)
        txo_metric_set(parked, NULL, (double)n);
    return rc;
}
