#include "core/common.h"

/*
 * The transactional inbox: txo_inbox_record() inserts a consumed message's id into
 * inbox_events inside the consumer's transaction, the one that also applies the message's
 * effect. The primary key on event_id makes the row the proof that the effect committed: a
 * second delivery finds the row and is skipped, a concurrent one waits on the row lock and then
 * finds it (include/txo/inbox.h has the whole contract).
 *
 * Invariants: nothing here opens, commits or rolls back a transaction; the payload is checked
 * to be JSON before it reaches the server (the column is JSON, and a bad payload is the
 * caller's bug, not a duplicate). Retention (txo_inbox_purge) lives in src/retention/.
 *
 * Thread-safety: no shared state; each call uses only the tx it is given.
 */

#include "core/text.h"
#include "inbox/inbox_sql.h"
#include "txo/inbox.h"

/* inbox_events.event_type VARCHAR(128); stricter in bytes than the column is in characters. */
#define EVENT_TYPE_MAX 128

static int check_args(const char *event_id, const char *event_type, const char *payload_json,
                      struct txo_error *err)
{
    if (event_id == NULL || event_id[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "inbox: event_id is empty");
    size_t id_len = strlen(event_id);
    if (id_len > TXO_INBOX_EVENT_ID_MAX)
        return txo_error_set(err, TXO_EINVAL, "inbox: event_id is %zu bytes, at most %d (%.64s...)",
                             id_len, TXO_INBOX_EVENT_ID_MAX, event_id);
    char whose[TXO_ERROR_MSG_MAX];
    snprintf(whose, sizeof(whose), "inbox event %s", event_id);
    int rc = txo__check_text_field(event_type, EVENT_TYPE_MAX, whose, "event_type", err);
    if (rc < 0)
        return rc;
    if (payload_json == NULL || payload_json[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "inbox event %s: payload is missing", event_id);
    return txo__json_check_payload(payload_json, strlen(payload_json), false, "inbox event",
                                   event_id, err);
}

int txo_inbox_record(struct txo_tx *tx, const char *event_id, const char *event_type,
                     const char *payload_json, bool *duplicate, struct txo_error *err)
{
    TXO_ASSERT(tx != NULL && duplicate != NULL);
    int rc = check_args(event_id, event_type, payload_json, err);
    if (rc < 0)
        return rc;

    struct txo_param params[] = {txo_p_str(event_id), txo_p_str(event_type),
                                 txo_p_str(payload_json)};
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, INBOX_SQL_RECORD, params, TXO_ARRAY_LEN(params), &res, err);
    if (rc < 0) {
        txo_error_wrap(err, "inbox record %s (%s)", event_id, event_type);
        return rc;
    }
    *duplicate = res.affected_rows == 0;
    TXO_LOG(TXO_LOG_DEBUG, "inbox", "record", TXO_KV_STR("message_id", event_id),
            TXO_KV_STR("event_type", event_type), TXO_KV_BOOL("duplicate", *duplicate));
    return 0;
}

int txo_inbox_record_many(struct txo_tx *tx, const struct txo_inbox_entry *entries, size_t n,
                          bool *duplicate, struct txo_error *err)
{
    TXO_ASSERT(tx != NULL && (n == 0 || (entries != NULL && duplicate != NULL)));
    for (size_t i = 0; i < n; i++) {
        int rc =
            check_args(entries[i].event_id, entries[i].event_type, entries[i].payload_json, err);
        if (rc < 0)
            return rc;
    }
    if (n == 0)
        return 0;
    size_t padded = txo_sql_in_list_size(n);
    char *known_sql = txo_sql_in_list(INBOX_SQL_KNOWN_MANY, padded, "");
    struct txo_param *p = txo_calloc(padded > 3 * n ? padded : 3 * n, sizeof(*p));
    struct txo_rows *rows = NULL;
    int rc = 0;
    if (known_sql == NULL || p == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "inbox record of %zu: out of memory", n);
        goto out;
    }
    for (size_t k = 0; k < padded; k++)
        p[k] = txo_p_str(entries[k < n ? k : n - 1].event_id);
    rc = txo_tx_query(tx, known_sql, p, padded, &rows, err);
    if (rc < 0)
        goto out;
    size_t fresh = 0;
    for (size_t i = 0; i < n; i++) {
        duplicate[i] = false;
        for (size_t r = 0; !duplicate[i] && r < txo_rows_count(rows); r++) {
            size_t len = 0;
            const char *v = txo_rows_str(rows, r, 0, &len);
            duplicate[i] = v != NULL && len == strlen(entries[i].event_id) &&
                           memcmp(v, entries[i].event_id, len) == 0;
        }
        for (size_t j = 0; !duplicate[i] && j < i; j++)
            duplicate[i] = strcmp(entries[j].event_id, entries[i].event_id) == 0;
        if (duplicate[i])
            continue;
        p[3 * fresh] = txo_p_str(entries[i].event_id);
        p[3 * fresh + 1] = txo_p_str(entries[i].event_type);
        p[3 * fresh + 2] = txo_p_str(entries[i].payload_json);
        fresh++;
    }
    if (fresh == 0)
        goto out;
    struct txo_exec_result res;
    rc = txo_tx_exec_rows(tx, INBOX_SQL_RECORD_MANY, fresh, INBOX_SQL_RECORD_ROW,
                          INBOX_SQL_RECORD_MANY_END, p, 3, &res, err);
    if (rc < 0) {
        txo_error_wrap(err, "inbox record of %zu", fresh);
        goto out;
    }
    if (res.affected_rows != fresh)
        rc = txo_error_set(err, TXO_ECONFLICT,
                           "inbox record of %zu: %llu inserted, another consumer recorded the "
                           "rest meanwhile",
                           fresh, (unsigned long long)res.affected_rows);
out:
    txo_rows_free(rows);
    txo_free(known_sql);
    txo_free(p);
    return rc;
}
