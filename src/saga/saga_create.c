/*
 * Creating sagas: txo_saga_create() and txo_saga_create_many() (include/txo/saga.h) insert
 * the instance and its PENDING steps inside the caller's transaction, so a saga starts with
 * the business write that asks for it. A correlation id already used by a saga of the same
 * type returns that saga instead of a second one.
 *
 * Thread-safety: uses only the transaction it is given.
 */
#include "core/common.h"

#include <uuid/uuid.h>

#include "saga/saga_internal.h"
#include "saga/saga_sql.h"
#include "trace/trace_params.h"

/* ------------------------------------------------------------------------------------------ */
/* Creating */

/* The saga's forward deadline from now, as a parameter of the instance's insert (NULL: none). */
static struct txo_param deadline_param(const struct txo_saga_def *def)
{
    return def->deadline_ms > 0 ? txo_p_i64((int64_t)def->deadline_ms * 1000) : txo_p_null();
}

/* Inserts the PENDING rows of every step of a new saga with one statement. */
/* The steps of the sagas made[0..m) (indexes into sagas), in one statement. */
static int insert_steps(struct txo_tx *tx, const struct txo_saga_def *def,
                        const struct txo_saga_new *sagas, const size_t *made, size_t m,
                        struct txo_error *err)
{
    size_t rows = m * def->n_steps;
    struct txo_param *ps = txo_calloc(3 * rows, sizeof(*ps));
    if (ps == NULL)
        return txo_error_set(err, TXO_ENOMEM, "creating the steps of %zu sagas: out of memory", m);
    size_t np = 0;
    for (size_t k = 0; k < m; k++)
        for (size_t i = 0; i < def->n_steps; i++) {
            ps[np++] = txo_p_str(sagas[made[k]].saga_id);
            ps[np++] = txo_p_i64((int64_t)i + 1);
            ps[np++] = txo_p_str(def->steps[i].name);
        }
    struct txo_exec_result res;
    int rc = txo_tx_exec_rows(tx, SAGA_SQL_INSERT_STEPS, rows, SAGA_SQL_INSERT_STEPS_ROW, "", ps, 3,
                              &res, err);
    txo_free(ps);
    if (rc == 0 && res.affected_rows != rows)
        rc = txo_error_set(err, TXO_EDB, "%llu of %zu saga steps created",
                           (unsigned long long)res.affected_rows, rows);
    return rc;
}

/*
 * After an insert that skipped some of sagas[0..n) (their correlation id had a saga, or came
 * earlier in the list): reads the id each correlation id has now; a saga the insert created
 * is one whose id is the one generated for it (in its saga_id until then).
 */
static int resolve_existing(struct txo_tx *tx, const struct txo_saga_def *def,
                            struct txo_saga_new *sagas, size_t n, struct txo_error *err)
{
    size_t padded = txo_sql_in_list_size(n);
    char *find = txo_sql_in_list(SAGA_SQL_FIND_MANY, padded, "");
    struct txo_param *p = txo_calloc(1 + padded, sizeof(*p));
    char(*generated)[TXO_SAGA_ID_LEN] = txo_calloc(n, sizeof(*generated));
    struct txo_rows *rows = NULL;
    int rc = 0;
    if (find == NULL || p == NULL || generated == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "creating %zu sagas %s: out of memory", n, def->type);
        goto out;
    }
    p[0] = txo_p_str(def->type);
    for (size_t k = 0; k < padded; k++)
        p[1 + k] = txo_p_str(sagas[k < n ? k : n - 1].correlation_id);
    rc = txo_tx_query(tx, find, p, 1 + padded, &rows, err);
    if (rc != 0)
        goto out;
    for (size_t k = 0; k < n; k++) {
        memcpy(generated[k], sagas[k].saga_id, TXO_SAGA_ID_LEN);
        sagas[k].saga_id[0] = '\0';
    }
    for (size_t r = 0; r < txo_rows_count(rows); r++) {
        const char *c = txo_rows_str(rows, r, 0, NULL);
        const char *id = txo_rows_str(rows, r, 1, NULL);
        for (size_t k = 0; c != NULL && id != NULL && k < n; k++)
            if (strcmp(sagas[k].correlation_id, c) == 0 && strlen(id) < TXO_SAGA_ID_LEN)
                memcpy(sagas[k].saga_id, id, strlen(id) + 1);
    }
    for (size_t k = 0; k < n; k++) {
        if (sagas[k].saga_id[0] == '\0') {
            rc = txo_error_set(err, TXO_EDB, "saga %s %s: exists but cannot be read back",
                               def->type, sagas[k].correlation_id);
            goto out;
        }
        sagas[k].created = strcmp(sagas[k].saga_id, generated[k]) == 0;
    }
out:
    txo_rows_free(rows);
    txo_free(find);
    txo_free(p);
    txo_free(generated);
    return rc;
}

int txo_saga_create_many(struct txo_tx *tx, const struct txo_saga_def *def,
                         struct txo_saga_new *sagas, size_t n, struct txo_error *err)
{
    int rc = txo__saga_check_def(def, err);
    if (rc != 0 || n == 0)
        return rc;
    for (size_t k = 0; k < n; k++) {
        const char *c = sagas[k].correlation_id;
        if (c == NULL || c[0] == '\0' || strlen(c) > SAGA_CORRELATION_MAX)
            return txo_error_set(err, TXO_EINVAL, "saga %s: correlation id must be 1..%d bytes",
                                 def->type, SAGA_CORRELATION_MAX);
        if (sagas[k].payload_json == NULL)
            return txo_error_set(err, TXO_EINVAL, "saga %s %s: payload is required", def->type, c);
    }
    struct txo_param *p = txo_calloc(7 * n, sizeof(*p));
    char(*tps)[TXO_TRACEPARENT_LEN + 1] = txo_calloc(n, sizeof(*tps));
    size_t *made = txo_calloc(n, sizeof(*made));
    if (p == NULL || tps == NULL || made == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "creating %zu sagas %s: out of memory", n, def->type);
        goto out;
    }
    size_t np = 0;
    for (size_t k = 0; k < n; k++) {
        uuid_t uuid;
        uuid_generate_random(uuid);
        uuid_unparse_lower(uuid, sagas[k].saga_id);
        sagas[k].created = true;
        p[np++] = txo_p_str(sagas[k].saga_id);
        p[np++] = txo_p_str(def->type);
        p[np++] = txo_p_str(sagas[k].correlation_id);
        p[np++] = txo_p_str(sagas[k].payload_json);
        p[np++] = deadline_param(def);
        txo__trace_params(sagas[k].trace, tps[k], &p[np]);
        np += 2;
    }
    struct txo_exec_result res;
    TXO_ASSERT(np == 7 * n);
    rc = txo_tx_exec_rows(tx, SAGA_SQL_INSERT_INSTANCES, n, SAGA_SQL_INSERT_INSTANCES_ROW,
                          SAGA_SQL_INSERT_INSTANCES_AFTER, p, 7, &res, err);
    if (rc == 0 && res.affected_rows > n)
        rc = txo_error_set(err, TXO_EDB, "%llu rows changed creating %zu sagas %s",
                           (unsigned long long)res.affected_rows, n, def->type);
    /* Fewer rows than sagas: some existed (or came twice in the list); the rest are new. */
    if (rc == 0 && res.affected_rows < n)
        rc = resolve_existing(tx, def, sagas, n, err);
    size_t m = 0;
    for (size_t k = 0; rc == 0 && k < n; k++)
        if (sagas[k].created)
            made[m++] = k;
    if (rc == 0 && m > 0)
        rc = insert_steps(tx, def, sagas, made, m, err);
    if (rc != 0 && n == 1)
        txo_error_wrap(err, "creating saga %s %s", def->type, sagas[0].correlation_id);
    else if (rc != 0)
        txo_error_wrap(err, "creating %zu sagas %s", n, def->type);
out:
    txo_free(p);
    txo_free(tps);
    txo_free(made);
    return rc;
}

int txo_saga_create(struct txo_tx *tx, const struct txo_saga_def *def, const char *correlation_id,
                    const char *payload_json, const struct txo_trace_ctx *trace,
                    char saga_id[TXO_SAGA_ID_LEN], bool *created, struct txo_error *err)
{
    struct txo_saga_new s = {
        .correlation_id = correlation_id, .payload_json = payload_json, .trace = trace};
    int rc = txo_saga_create_many(tx, def, &s, 1, err);
    if (rc != 0)
        return rc;
    memcpy(saga_id, s.saga_id, TXO_SAGA_ID_LEN);
    if (created != NULL)
        *created = s.created;
    return 0;
}
