/*
 * Idempotency keys of incoming requests: see include/txo/idempotency.h for the protocol. This
 * file holds the request hash (canonical JSON + SHA-256) and the key row's life:
 * PROCESSING (inside the request's transaction) -> COMPLETED with the stored response.
 *
 * The hash is computed before any SQL runs, so a malformed body costs no round trip.
 */
#include "core/common.h"

#include <jansson.h>
#include <openssl/evp.h>

#include "idempotency/idempotency_sql.h"
#include "txo/jansson.h"

int txo_idem_key_check(const char *key, struct txo_error *err)
{
    if (key == NULL || key[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "Idempotency-Key is missing or empty");
    size_t len = strlen(key);
    if (len > TXO_IDEM_KEY_MAX)
        return txo_error_set(err, TXO_EINVAL, "Idempotency-Key is %zu bytes, at most %d allowed",
                             len, TXO_IDEM_KEY_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c < 0x21 || c > 0x7e)
            return txo_error_set(err, TXO_EINVAL,
                                 "Idempotency-Key may hold only printable ASCII without spaces "
                                 "(byte %zu is 0x%02x)",
                                 i, c);
    }
    return 0;
}

int txo_idem_hash_doc(const char *method, const char *path, const json_t *doc,
                      char out[TXO_IDEM_HASH_LEN], struct txo_error *err)
{
    char *canonical = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    if (canonical == NULL)
        return txo_error_set(err, TXO_ENOMEM, "canonical JSON of the request body");

    int rc = 0;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int digest_len = 0;
    if (md == NULL || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1 ||
        EVP_DigestUpdate(md, method, strlen(method)) != 1 || EVP_DigestUpdate(md, " ", 1) != 1 ||
        EVP_DigestUpdate(md, path, strlen(path)) != 1 || EVP_DigestUpdate(md, "\n", 1) != 1 ||
        EVP_DigestUpdate(md, canonical, strlen(canonical)) != 1 ||
        EVP_DigestFinal_ex(md, digest, &digest_len) != 1 || digest_len != 32) {
        rc = txo_error_set(err, TXO_ENOMEM, "SHA-256 of the request failed");
        goto out;
    }
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        out[2 * i] = hex[digest[i] >> 4];
        out[2 * i + 1] = hex[digest[i] & 0xf];
    }
    out[64] = '\0';
out:
    EVP_MD_CTX_free(md);
    free(canonical); /* jansson's allocator is malloc */
    return rc;
}

int txo_idem_hash(const char *method, const char *path, const char *body, size_t len,
                  char out[TXO_IDEM_HASH_LEN], struct txo_error *err)
{
    json_error_t jerr;
    json_t *doc = json_loadb(body, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (doc == NULL)
        return txo_error_set(err, TXO_EINVAL, "malformed JSON at line %d column %d: %s", jerr.line,
                             jerr.column, jerr.text);
    int rc = txo_idem_hash_doc(method, path, doc, out, err);
    json_decref(doc);
    return rc;
}

void txo_idem_claim_init(struct txo_idem_claim *claim)
{
    memset(claim, 0, sizeof(*claim));
}

void txo_idem_claim_release(struct txo_idem_claim *claim)
{
    if (claim == NULL)
        return;
    txo_free(claim->response);
    txo_idem_claim_init(claim);
}

/* Looks at the existing (locked) row of key and decides. */
static int examine_existing(struct txo_tx *tx, const char *key, const char hash[TXO_IDEM_HASH_LEN],
                            unsigned stale_s, struct txo_idem_claim *claim, struct txo_error *err)
{
    struct txo_param params[] = {txo_p_i64(stale_s), txo_p_str(key)};
    struct txo_rows *rows = NULL;
    int rc = txo_tx_query(tx, IDEM_SQL_READ, params, TXO_ARRAY_LEN(params), &rows, err);
    if (rc != 0)
        return rc;
    if (txo_rows_count(rows) != 1) {
        /* Deleted between the claim and the read: only the retention cleaner deletes, and
         * only old COMPLETED rows; report it as a transient conflict so the caller retries. */
        rc = txo_error_set(err, TXO_EDEADLOCK, "idempotency key %s vanished while locked", key);
        goto out;
    }
    const char *stored_hash = txo_rows_str(rows, 0, 0, NULL);
    const char *status = txo_rows_str(rows, 0, 1, NULL);
    if (stored_hash == NULL || strcmp(stored_hash, hash) != 0) {
        claim->outcome = TXO_IDEM_CONFLICT;
    } else if (status != NULL && strcmp(status, "COMPLETED") == 0) {
        claim->outcome = TXO_IDEM_REPLAY;
        claim->status = txo_rows_is_null(rows, 0, 2) ? 200 : (int)txo_rows_i64(rows, 0, 2);
        const char *body = txo_rows_str(rows, 0, 3, NULL);
        claim->response = txo_strdup(body != NULL ? body : "null");
        if (claim->response == NULL) {
            rc = txo_error_set(err, TXO_ENOMEM, "stored response of key %s", key);
            goto out;
        }
    } else if (status != NULL && strcmp(status, "PROCESSING") == 0 &&
               txo_rows_i64(rows, 0, 4) != 0) {
        struct txo_param p[] = {txo_p_str(key)};
        rc = txo_tx_exec(tx, IDEM_SQL_TAKE_OVER, p, 1, NULL, err);
        if (rc != 0)
            goto out;
        TXO_LOG(TXO_LOG_WARN, "idempotency", "took over a stale PROCESSING key",
                TXO_KV_STR("key", key));
        claim->outcome = TXO_IDEM_NEW;
        claim->taken_over = true;
    } else {
        /* PROCESSING and fresh (or FAILED, which txo never writes: treat it as busy). */
        claim->outcome = TXO_IDEM_IN_PROGRESS;
    }
out:
    txo_rows_free(rows);
    return rc;
}

int txo_idem_begin(struct txo_tx *tx, const char *key, const char hash[TXO_IDEM_HASH_LEN],
                   unsigned stale_s, struct txo_idem_claim *claim, struct txo_error *err)
{
    txo_idem_claim_init(claim);
    int rc = txo_idem_key_check(key, err);
    if (rc != 0)
        return rc;
    struct txo_param params[] = {txo_p_str(key), txo_p_str(hash)};
    struct txo_exec_result res = {0};
    rc = txo_tx_exec(tx, IDEM_SQL_CLAIM, params, TXO_ARRAY_LEN(params), &res, err);
    if (rc == TXO_ELOCKTIMEOUT) {
        /* Another open transaction holds the key: the request is in progress. The statement
         * alone was rolled back; the transaction is still usable. */
        claim->outcome = TXO_IDEM_IN_PROGRESS;
        return 0;
    }
    if (rc != 0)
        return rc;
    if (res.affected_rows == 1) {
        claim->outcome = TXO_IDEM_NEW;
        return 0;
    }
    rc = examine_existing(tx, key, hash, stale_s, claim, err);
    if (rc != 0)
        txo_idem_claim_release(claim);
    return rc;
}

int txo_idem_complete(struct txo_tx *tx, const char *key, int status, const char *response_json,
                      struct txo_error *err)
{
    json_error_t jerr;
    json_t *doc = json_loads(response_json, JSON_DECODE_ANY, &jerr);
    if (doc == NULL)
        return txo_error_set(err, TXO_EINVAL, "stored response is not JSON: %s", jerr.text);
    json_decref(doc);
    struct txo_param params[] = {txo_p_i64(status), txo_p_str(response_json), txo_p_str(key)};
    struct txo_exec_result res = {0};
    int rc = txo_tx_exec(tx, IDEM_SQL_COMPLETE, params, TXO_ARRAY_LEN(params), &res, err);
    if (rc != 0)
        return rc;
    if (res.affected_rows != 1)
        return txo_error_set(err, TXO_ESTATE, "idempotency key %s is not PROCESSING here", key);
    return 0;
}

void txo_idem_stored_release(struct txo_idem_stored *out, size_t n)
{
    for (size_t i = 0; out != NULL && i < n; i++) {
        txo_free(out[i].response);
        memset(&out[i], 0, sizeof(out[i]));
    }
}

/* out[i] from row k of IDEM_SQL_LOOKUP_MANY_BEFORE: the same columns and decisions as
 * examine_existing()'s. */
static int stored_from_row(const struct txo_rows *rows, size_t k, const char *key,
                           struct txo_idem_stored *out, struct txo_error *err)
{
    const char *hash = txo_rows_str(rows, k, 1, NULL);
    const char *status = txo_rows_str(rows, k, 2, NULL);
    snprintf(out->hash, sizeof(out->hash), "%s", hash != NULL ? hash : "");
    if (status == NULL || strcmp(status, "COMPLETED") != 0) {
        out->row = TXO_IDEM_ROW_PROCESSING;
        return 0;
    }
    const char *body = txo_rows_str(rows, k, 4, NULL);
    out->row = TXO_IDEM_ROW_COMPLETED;
    out->status = txo_rows_is_null(rows, k, 3) ? 200 : (int)txo_rows_i64(rows, k, 3);
    out->response = txo_strdup(body != NULL ? body : "null");
    if (out->response == NULL)
        return txo_error_set(err, TXO_ENOMEM, "stored response of key %s", key);
    return 0;
}

int txo_idem_lookup_many(struct txo_tx *tx, const char *const *keys, size_t n,
                         struct txo_idem_stored *out, struct txo_error *err)
{
    TXO_ASSERT(tx != NULL && (n == 0 || (keys != NULL && out != NULL)));
    for (size_t i = 0; i < n; i++)
        memset(&out[i], 0, sizeof(out[i]));
    for (size_t i = 0; i < n; i++) {
        int rc = txo_idem_key_check(keys[i], err);
        if (rc != 0)
            return rc;
    }
    if (n == 0)
        return 0;
    size_t slots = txo_sql_in_list_size(n);
    struct txo_param *params = txo_calloc(slots, sizeof(*params));
    char *sql = txo_sql_in_list(IDEM_SQL_LOOKUP_MANY_BEFORE, slots, "");
    struct txo_rows *rows = NULL;
    int rc;
    if (params == NULL || sql == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "lookup of %zu idempotency keys", n);
        goto out;
    }
    for (size_t i = 0; i < slots; i++)
        params[i] = txo_p_str(keys[i < n ? i : n - 1]);
    rc = txo_tx_query(tx, sql, params, slots, &rows, err);
    if (rc < 0)
        goto out;
    rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        for (size_t k = 0; k < txo_rows_count(rows); k++) {
            const char *key = txo_rows_str(rows, k, 0, NULL);
            if (key == NULL || strcmp(key, keys[i]) != 0)
                continue;
            rc = stored_from_row(rows, k, keys[i], &out[i], err);
            break;
        }
    if (rc != 0)
        txo_idem_stored_release(out, n);
out:
    txo_rows_free(rows);
    txo_free(params);
    txo_free(sql);
    return rc;
}

int txo_idem_store_completed_many(struct txo_tx *tx, const struct txo_idem_done *rows, size_t n,
                                  struct txo_error *err)
{
    TXO_ASSERT(tx != NULL && (n == 0 || rows != NULL));
    for (size_t i = 0; i < n; i++) {
        int rc = txo_idem_key_check(rows[i].key, err);
        if (rc != 0)
            return rc;
        if (rows[i].hash == NULL || rows[i].hash[0] == '\0')
            return txo_error_set(err, TXO_EINVAL, "idempotency key %s: request hash is missing",
                                 rows[i].key);
        json_error_t jerr;
        json_t *doc = rows[i].response_json != NULL
                          ? json_loads(rows[i].response_json, JSON_DECODE_ANY, &jerr)
                          : NULL;
        if (doc == NULL)
            return txo_error_set(err, TXO_EINVAL,
                                 "idempotency key %s: stored response is not JSON%s%s", rows[i].key,
                                 rows[i].response_json != NULL ? ": " : "",
                                 rows[i].response_json != NULL ? jerr.text : "");
        json_decref(doc);
    }
    if (n == 0)
        return 0;
    struct txo_param *params = txo_calloc(4 * n, sizeof(*params));
    if (params == NULL)
        return txo_error_set(err, TXO_ENOMEM, "insert of %zu idempotency keys", n);
    for (size_t i = 0; i < n; i++) {
        params[4 * i] = txo_p_str(rows[i].key);
        params[4 * i + 1] = txo_p_str(rows[i].hash);
        params[4 * i + 2] = txo_p_i64(rows[i].status);
        params[4 * i + 3] = txo_p_str(rows[i].response_json);
    }
    struct txo_exec_result res;
    int rc = txo_tx_exec_rows(tx, IDEM_SQL_INSERT_COMPLETED_BEFORE, n,
                              IDEM_SQL_INSERT_COMPLETED_ROW, "", params, 4, &res, err);
    txo_free(params);
    if (rc < 0)
        txo_error_wrap(err, "%zu completed idempotency keys", n);
    else if (res.affected_rows != n)
        rc = txo_error_set(err, TXO_EDB, "%llu of %zu idempotency keys inserted",
                           (unsigned long long)res.affected_rows, n);
    return rc;
}

int txo_idem_purge(struct txo_db *db, unsigned older_than_s, unsigned batch_size,
                   unsigned max_batches, uint64_t *deleted, struct txo_error *err)
{
    uint64_t total = 0;
    int rc = 0;
    if (batch_size == 0) {
        rc = txo_error_set(err, TXO_EINVAL, "batch_size must be > 0");
        goto out;
    }
    for (unsigned batch = 0; max_batches == 0 || batch < max_batches; batch++) {
        struct txo_param params[] = {txo_p_i64(older_than_s), txo_p_i64(batch_size)};
        struct txo_exec_result res = {0};
        rc = txo_db_exec(db, IDEM_SQL_PURGE, params, TXO_ARRAY_LEN(params), &res, err);
        if (rc != 0)
            goto out;
        total += res.affected_rows;
        if (res.affected_rows < batch_size)
            break;
    }
out:
    if (deleted != NULL)
        *deleted = total;
    return rc;
}
