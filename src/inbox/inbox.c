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

#include <jansson.h>

#include "inbox/inbox_sql.h"
#include "txo/inbox.h"

/* inbox_events.event_type VARCHAR(128); stricter in bytes than the column is in characters. */
#define EVENT_TYPE_MAX 128

/* Checks that payload is one JSON document (integers beyond int64 are valid JSON too). */
static int check_payload(const char *payload, const char *event_id, struct txo_error *err)
{
    json_error_t jerr;
    json_t *doc = json_loads(payload, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &jerr);
    if (doc == NULL)
        return txo_error_set(err, TXO_ECONSTRAINT,
                             "inbox event %s: payload is not JSON: %s at line %d column %d",
                             event_id, jerr.text, jerr.line, jerr.column);
    json_decref(doc);
    return 0;
}

static int check_args(const char *event_id, const char *event_type, const char *payload_json,
                      struct txo_error *err)
{
    if (event_id == NULL || event_id[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "inbox: event_id is empty");
    size_t id_len = strlen(event_id);
    if (id_len > TXO_INBOX_EVENT_ID_MAX)
        return txo_error_set(err, TXO_EINVAL, "inbox: event_id is %zu bytes, at most %d (%.64s...)",
                             id_len, TXO_INBOX_EVENT_ID_MAX, event_id);
    if (event_type == NULL || event_type[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "inbox event %s: event_type is empty", event_id);
    size_t type_len = strlen(event_type);
    if (type_len > EVENT_TYPE_MAX)
        return txo_error_set(err, TXO_EINVAL, "inbox event %s: event_type is %zu bytes, at most %d",
                             event_id, type_len, EVENT_TYPE_MAX);
    if (payload_json == NULL || payload_json[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "inbox event %s: payload is missing", event_id);
    return check_payload(payload_json, event_id, err);
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
    TXO_LOG(TXO_LOG_DEBUG, "inbox", "record message_id=%s event_type=%s %s", event_id, event_type,
            *duplicate ? "duplicate skipped" : "recorded");
    return 0;
}
