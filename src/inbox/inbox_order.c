#include "core/common.h"

/*
 * The inbox's order check: txo_inbox_check_order() judges consumed events against the last
 * sequence handled per aggregate (inbox_aggregates) and moves it, inside the consumer's
 * transaction (include/txo/inbox.h has the contract, inbox_sql.h the two statements).
 *
 * Per call: the distinct aggregates of the events with a sequence are looked up in one locking
 * SELECT, the events judged in the order given (a later event of the same aggregate against
 * the earlier one's sequence), and every aggregate whose last sequence moved written back in
 * one multi-row upsert.
 *
 * Thread-safety: no shared state; each call uses only the tx it is given.
 */

#include "inbox/inbox_sql.h"
#include "txo/inbox.h"

/* Column widths of inbox_aggregates (sql/migrations/0016_inbox_sequence.sql). */
#define AGGREGATE_TYPE_MAX 64
#define AGGREGATE_ID_MAX   255

static const char *const order_names[] = {
    [TXO_INBOX_UNCHECKED] = "unchecked",
    [TXO_INBOX_IN_ORDER] = "in_order",
    [TXO_INBOX_GAP] = "gap",
    [TXO_INBOX_OLDER] = "older",
};

const char *txo_inbox_order_name(enum txo_inbox_order o)
{
    return txo__name_known(order_names, TXO_ARRAY_LEN(order_names), (long)o, "inbox order");
}

/* One distinct aggregate of the call. */
struct agg {
    const char *type, *id;
    uint64_t last;  /* the last sequence handled: stored, then moved by this call's events */
    uint64_t found; /* the stored one (0: no row) */
};

static bool same(const struct agg *a, const struct txo_inbox_position *p)
{
    return strcmp(a->type, p->aggregate_type) == 0 && strcmp(a->id, p->aggregate_id) == 0;
}

static bool checked(const struct txo_inbox_position *p)
{
    return p->sequence != 0 && p->aggregate_type != NULL && p->aggregate_id != NULL;
}

/* The distinct aggregates of the checked positions into aggs (room for n); returns how many. */
static size_t distinct(const struct txo_inbox_position *pos, size_t n, struct agg *aggs, size_t *of)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!checked(&pos[i]))
            continue;
        size_t j = 0;
        while (j < k && !same(&aggs[j], &pos[i]))
            j++;
        if (j == k)
            aggs[k++] = (struct agg){pos[i].aggregate_type, pos[i].aggregate_id, 0, 0};
        of[i] = j;
    }
    return k;
}

static int check_strings(const struct txo_inbox_position *p, struct txo_error *err)
{
    size_t t = strlen(p->aggregate_type), i = strlen(p->aggregate_id);
    if (t == 0 || t > AGGREGATE_TYPE_MAX || i == 0 || i > AGGREGATE_ID_MAX)
        return txo_error_set(err, TXO_EINVAL,
                             "inbox order: aggregate \"%.64s\"/\"%.64s\" is empty or too long "
                             "(type at most %d bytes, id %d)",
                             p->aggregate_type, p->aggregate_id, AGGREGATE_TYPE_MAX,
                             AGGREGATE_ID_MAX);
    return 0;
}

/*
 * Both statements have one row per aggregate; the count is rounded up to a power of two, the
 * last row repeated (harmless in an IN list and in the upsert), so that a consumer prepares a
 * handful of statements rather than one per batch size.
 */

/* Step 1: the stored last sequences into aggs[].found and .last. */
static int read_last(struct txo_tx *tx, struct agg *aggs, size_t k, struct txo_param *p,
                     struct txo_error *err)
{
    size_t padded = txo_sql_in_list_size(k);
    char *sql = txo_sql_values_rows_then(INBOX_SQL_ORDER_LAST, padded, INBOX_SQL_ORDER_LAST_ROW,
                                         INBOX_SQL_ORDER_LAST_END);
    if (sql == NULL)
        return txo_error_set(err, TXO_ENOMEM, "inbox order of %zu aggregates: out of memory", k);
    for (size_t j = 0; j < padded; j++) {
        p[2 * j] = txo_p_str(aggs[j < k ? j : k - 1].type);
        p[2 * j + 1] = txo_p_str(aggs[j < k ? j : k - 1].id);
    }
    struct txo_rows *rows = NULL;
    int rc = txo_tx_query(tx, sql, p, 2 * padded, &rows, err);
    txo_free(sql);
    if (rc < 0)
        return rc;
    for (size_t r = 0; r < txo_rows_count(rows); r++) {
        const char *type = txo_rows_str(rows, r, 0, NULL), *id = txo_rows_str(rows, r, 1, NULL);
        int64_t last = txo_rows_i64(rows, r, 2);
        for (size_t j = 0; j < k; j++) {
            if (type != NULL && id != NULL && strcmp(aggs[j].type, type) == 0 &&
                strcmp(aggs[j].id, id) == 0)
                aggs[j].found = aggs[j].last = last > 0 ? (uint64_t)last : 0;
        }
    }
    txo_rows_free(rows);
    return 0;
}

/* Step 2: the aggregates whose last sequence moved, written back. */
static int write_last(struct txo_tx *tx, const struct agg *aggs, size_t k, struct txo_param *p,
                      struct txo_error *err)
{
    size_t moved = 0;
    for (size_t j = 0; j < k; j++) {
        if (aggs[j].last == aggs[j].found)
            continue;
        p[3 * moved] = txo_p_str(aggs[j].type);
        p[3 * moved + 1] = txo_p_str(aggs[j].id);
        p[3 * moved + 2] = txo_p_i64((int64_t)aggs[j].last);
        moved++;
    }
    if (moved == 0)
        return 0;
    size_t padded = txo_sql_in_list_size(moved);
    for (size_t r = moved; r < padded; r++) {
        p[3 * r] = p[3 * (moved - 1)];
        p[3 * r + 1] = p[3 * (moved - 1) + 1];
        p[3 * r + 2] = p[3 * (moved - 1) + 2];
    }
    char *sql = txo_sql_values_rows_then(INBOX_SQL_ORDER_MOVE, padded, INBOX_SQL_ORDER_MOVE_ROW,
                                         INBOX_SQL_ORDER_MOVE_END);
    if (sql == NULL)
        return txo_error_set(err, TXO_ENOMEM, "inbox order of %zu aggregates: out of memory",
                             padded);
    int rc = txo_tx_exec(tx, sql, p, 3 * padded, NULL, err);
    txo_free(sql);
    return rc;
}

int txo_inbox_check_order(struct txo_tx *tx, const struct txo_inbox_position *pos, size_t n,
                          enum txo_inbox_order *order, struct txo_error *err)
{
    TXO_ASSERT(tx != NULL && (n == 0 || (pos != NULL && order != NULL)));
    for (size_t i = 0; i < n; i++) {
        order[i] = TXO_INBOX_UNCHECKED;
        if (checked(&pos[i])) {
            int rc = check_strings(&pos[i], err);
            if (rc < 0)
                return rc;
        }
    }
    struct agg *aggs = txo_calloc(n > 0 ? n : 1, sizeof(*aggs));
    size_t *of = txo_calloc(n > 0 ? n : 1, sizeof(*of));
    struct txo_param *p = txo_calloc(n > 0 ? 6 * n : 1, sizeof(*p)); /* 3 per row, padded */
    int rc = 0;
    if (aggs == NULL || of == NULL || p == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "inbox order of %zu events: out of memory", n);
        goto out;
    }
    size_t k = distinct(pos, n, aggs, of);
    if (k == 0)
        goto out;
    rc = read_last(tx, aggs, k, p, err);
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (!checked(&pos[i]))
            continue;
        struct agg *a = &aggs[of[i]];
        if (pos[i].sequence <= a->last) {
            order[i] = TXO_INBOX_OLDER;
            continue;
        }
        order[i] = pos[i].prev_sequence > a->last ? TXO_INBOX_GAP : TXO_INBOX_IN_ORDER;
        a->last = pos[i].sequence;
    }
    rc = write_last(tx, aggs, k, p, err);
out:
    if (rc < 0)
        txo_error_wrap(err, "inbox order check of %zu events", n);
    txo_free(aggs);
    txo_free(of);
    txo_free(p);
    return rc;
}
