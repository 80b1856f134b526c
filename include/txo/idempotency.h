/*
 * Idempotency keys of incoming requests: a client that repeats a request with the
 * same Idempotency-Key gets the response of the first one, and the effect happens once.
 *
 * How it works, inside the caller's ONE transaction (the one that also writes the effect):
 *   1. txo_idem_begin() inserts the key row (PROCESSING, the request hash). When the row
 *      exists already it is locked and examined instead:
 *        - another request hash                      -> TXO_IDEM_CONFLICT (HTTP 422)
 *        - COMPLETED                                  -> TXO_IDEM_REPLAY with the stored response
 *        - PROCESSING, changed less than stale_s ago  -> TXO_IDEM_IN_PROGRESS (HTTP 409)
 *        - PROCESSING, older (a crashed writer)       -> taken over: TXO_IDEM_NEW
 *   2. The caller writes its effect (order, items, outbox event, ...).
 *   3. txo_idem_complete() stores the response (status + JSON body) and marks the key
 *      COMPLETED. Everything commits together, or nothing does: a process that dies before
 *      COMMIT leaves no trace (the server rolls the transaction back), so a retry starts fresh.
 *
 * A concurrent request with the same key waits on the first one's uncommitted key row. When
 * the first commits, the second sees COMPLETED and replays the same response; when the wait
 * exceeds the session's innodb_lock_wait_timeout, txo_idem_begin() reports
 * TXO_IDEM_IN_PROGRESS (409) instead of failing. Callers that want a short bound on that wait
 * open the connection with a small lock_wait_timeout_s (the HTTP API uses its
 * --idempotency-wait setting).
 *
 * The request hash is SHA-256 over "METHOD PATH\n" and the canonical form of the JSON body
 * (objects with sorted keys, no insignificant whitespace, exact integers), so two bodies that
 * differ only in key order or spacing are the same request.
 *
 * Thread-safety: functions use only the transaction or connection they are given.
 */
#ifndef TXO_IDEMPOTENCY_H
#define TXO_IDEMPOTENCY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/db.h"
#include "txo/err.h"

#define TXO_IDEM_KEY_MAX  255 /* bytes, as idempotency_keys.idempotency_key VARCHAR(255) */
#define TXO_IDEM_HASH_LEN 65  /* 64 hex digits plus NUL */

/*
 * Checks that key is usable: 1..TXO_IDEM_KEY_MAX bytes of printable ASCII (0x21..0x7e).
 * Errors: TXO_EINVAL with a message saying what is wrong.
 */
TXO_API TXO_MUST_CHECK int txo_idem_key_check(const char *key, struct txo_error *err);

/*
 * Hashes a request: SHA-256 of "<method> <path>\n<canonical JSON of body>" as 64 lower-case
 * hex digits. Errors: TXO_EINVAL when body is not one JSON value (message with the line and
 * column), TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_idem_hash(const char *method, const char *path, const char *body,
                                         size_t len, char out[TXO_IDEM_HASH_LEN],
                                         struct txo_error *err);

/* txo_idem_hash_doc(), the same for a body already parsed with jansson, is in txo/jansson.h. */

enum txo_idem_outcome {
    TXO_IDEM_NEW,         /* the key is ours: write the effect, then txo_idem_complete() */
    TXO_IDEM_REPLAY,      /* completed before with the same request: answer the stored response */
    TXO_IDEM_CONFLICT,    /* used before with another request body */
    TXO_IDEM_IN_PROGRESS, /* another request with this key is still being processed */
};

/* What txo_idem_begin() found. */
struct txo_idem_claim {
    enum txo_idem_outcome outcome;
    bool taken_over; /* NEW by taking over a stale PROCESSING row */
    int status;      /* REPLAY: the stored HTTP status */
    char *response;  /* REPLAY: the stored JSON body (owned; txo_idem_claim_release) */
};

TXO_API void txo_idem_claim_init(struct txo_idem_claim *claim);
TXO_API void txo_idem_claim_release(struct txo_idem_claim *claim);

/*
 * Step 1 above, in tx. hash is txo_idem_hash()'s output; stale_s is the age after which a
 * PROCESSING row is considered abandoned. On success (return 0) *claim says what to do; for
 * anything but TXO_IDEM_NEW nothing was written and the caller should end tx without writing.
 * Errors: TXO_EINVAL (bad key), DB errors other than the lock wait timeout described above.
 */
TXO_API TXO_MUST_CHECK int txo_idem_begin(struct txo_tx *tx, const char *key,
                                          const char hash[TXO_IDEM_HASH_LEN], unsigned stale_s,
                                          struct txo_idem_claim *claim, struct txo_error *err);

/*
 * Step 3 above, in the same tx: stores status and the JSON body response_json and marks the
 * key COMPLETED. Call it only after txo_idem_begin() returned TXO_IDEM_NEW for key in this
 * transaction: it does not check that (the row lock taken by begin is what makes the key
 * ours). Errors: TXO_ESTATE when the key has no PROCESSING row, TXO_EINVAL (response not
 * JSON), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_idem_complete(struct txo_tx *tx, const char *key, int status,
                                             const char *response_json, struct txo_error *err);

/*
 * Batches, for a caller that commits a group of requests in one transaction (the order
 * service's order writer) and decides itself what each request gets from what is stored.
 */

/* What txo_idem_lookup_many() found for one key. */
enum txo_idem_row {
    TXO_IDEM_ROW_ABSENT,     /* no row (or one another transaction has not committed yet) */
    TXO_IDEM_ROW_PROCESSING, /* a row not COMPLETED (PROCESSING; FAILED, never written by txo) */
    TXO_IDEM_ROW_COMPLETED,  /* a COMPLETED row: status and response hold its stored response */
};

struct txo_idem_stored {
    enum txo_idem_row row;
    char hash[TXO_IDEM_HASH_LEN]; /* the stored request hash ("" when absent or NULL) */
    int status;                   /* COMPLETED: the stored HTTP status (200 when NULL) */
    char *response;               /* COMPLETED: the stored JSON body, "null" when NULL (owned) */
};

/* Frees the responses of out[0..n) and resets them to ABSENT. out may be NULL when n is 0. */
TXO_API void txo_idem_stored_release(struct txo_idem_stored *out, size_t n);

/*
 * The stored rows of keys[0..n) in one statement, in tx: out[i] is what is stored for keys[i]
 * (a key given twice gets the same answer twice). A consistent read that locks nothing (see
 * IDEM_SQL_LOOKUP_MANY_BEFORE for why that is enough): a key another transaction holds
 * uncommitted is reported ABSENT, and the caller's later insert of it waits for that
 * transaction and fails with TXO_EDUPLICATE when it commits (txo_idem_store_completed_many).
 * Keys are compared byte for byte. On error nothing is left to release in out.
 * Errors: TXO_EINVAL (a bad key, see txo_idem_key_check()), TXO_ENOMEM, DB errors.
 * Thread-safety: uses only tx; out belongs to the caller.
 */
TXO_API TXO_MUST_CHECK int txo_idem_lookup_many(struct txo_tx *tx, const char *const *keys,
                                                size_t n, struct txo_idem_stored *out,
                                                struct txo_error *err);

/* A key to store COMPLETED at once. All strings are borrowed for the call. */
struct txo_idem_done {
    const char *key;
    const char *hash;          /* txo_idem_hash()'s output for the request */
    int status;                /* the response's HTTP status */
    const char *response_json; /* the response's JSON body */
};

/*
 * Inserts rows[0..n) as COMPLETED keys with their responses, in one statement in tx: for a
 * transaction that writes the requests' effects and their keys together, so no PROCESSING
 * state is ever visible (what txo_idem_begin() + txo_idem_complete() do for one request). Each
 * key and response is checked first, as txo_idem_begin() and txo_idem_complete() check them:
 * nothing is written when one is refused. A key that exists already, or that another
 * transaction inserted meanwhile (the insert waits for that transaction's lock while it is
 * open), fails the whole call with TXO_EDUPLICATE (1062); the statement is rolled back, the
 * caller should roll back tx. Locks the new rows.
 * Errors: TXO_EINVAL (bad key, hash missing, response not JSON), TXO_EDUPLICATE,
 * TXO_ELOCKTIMEOUT (the wait for another transaction's key ran out), TXO_ENOMEM, DB errors.
 * Thread-safety: uses only tx.
 */
TXO_API TXO_MUST_CHECK int txo_idem_store_completed_many(struct txo_tx *tx,
                                                         const struct txo_idem_done *rows, size_t n,
                                                         struct txo_error *err);

/*
 * Retention: deletes COMPLETED keys created more than older_than_s seconds ago, batch_size
 * rows per short transaction, until none is left or max_batches ran (0 = no limit). A client
 * repeating a request after that age creates a new order: keep the age well above any
 * client's retry horizon (the worker's default is 24 h). *deleted (may be NULL) receives the
 * count. Errors: DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_idem_purge(struct txo_db *db, unsigned older_than_s,
                                          unsigned batch_size, unsigned max_batches,
                                          uint64_t *deleted, struct txo_error *err);

#endif
