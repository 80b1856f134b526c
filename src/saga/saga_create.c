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

/* ------------------------------------------------------------------------------------------ */
/* Creating */

/* The trace context's traceparent (formatted into tp, TXO_TRACEPARENT_LEN + 1 bytes) and
 * tracestate as parameters of the instance's insert (NULL: none). */
static void trace_params(const struct txo_trace_ctx *trace, char *tp, struct txo_param *p)
{
    p[0] = txo_p_null();
    p[1] = txo_p_null();
    if (trace == NULL)
        return;
    txo_trace_format(trace, tp);
    p[0] = txo_p_str(tp);
    if (trace->state[0] != '\0')
        p[1] = txo_p_str(trace->state);
}

/* The saga's forward deadline from now, as a parameter of the instance's insert (NULL: none). */
static struct txo_param deadline_param(const struct txo_saga_def *def)
{
    return def->deadline_ms > 0 ? txo_p_i64((int64_t)def->deadline_ms * 1000) : txo_p_null();
}

/* Inserts the PENDING rows of every step of a new saga with one statement. */
static int insert_steps(struct txo_tx *tx, const struct txo_saga_def *def, const char *id,
                        struct txo_error *err)
{
    char *sql = txo_sql_values_rows(SAGA_SQL_INSERT_STEPS, def->n_steps, SAGA_SQL_INSERT_STEPS_ROW);
    struct txo_param *ps = txo_calloc(3 * def->n_steps, sizeof(*ps));
    int rc = 0;
    if (sql == NULL || ps == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "creating the steps of saga %s: out of memory", id);
        goto out;
    }
    for (size_t i = 0; i < def->n_steps; i++) {
        ps[3 * i] = txo_p_str(id);
        ps[3 * i + 1] = txo_p_i64((int64_t)i + 1);
        ps[3 * i + 2] = txo_p_str(def->steps[i].name);
    }
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, sql, ps, 3 * def->n_steps, &res, err);
    if (rc == 0 && res.affected_rows != def->n_steps)
        rc = txo_error_set(err, TXO_EDB, "saga %s: %llu of %zu steps created", id,
                           (unsigned long long)res.affected_rows, def->n_steps);
out:
    txo_free(sql);
    txo_free(ps);
    return rc;
}

int txo_saga_create(struct txo_tx *tx, const struct txo_saga_def *def, const char *correlation_id,
                    const char *payload_json, const struct txo_trace_ctx *trace,
                    char saga_id[TXO_SAGA_ID_LEN], bool *created, struct txo_error *err)
{
    int rc = txo__saga_check_def(def, err);
    if (rc != 0)
        return rc;
    if (correlation_id == NULL || correlation_id[0] == '\0' ||
        strlen(correlation_id) > SAGA_CORRELATION_MAX)
        return txo_error_set(err, TXO_EINVAL, "saga %s: correlation id must be 1..%d bytes",
                             def->type, SAGA_CORRELATION_MAX);
    if (payload_json == NULL)
        return txo_error_set(err, TXO_EINVAL, "saga %s %s: payload is required", def->type,
                             correlation_id);
    uuid_t uuid;
    char id[TXO_SAGA_ID_LEN];
    uuid_generate_random(uuid);
    uuid_unparse_lower(uuid, id);

    char tp[TXO_TRACEPARENT_LEN + 1];
    struct txo_param pi[7] = {txo_p_str(id), txo_p_str(def->type), txo_p_str(correlation_id),
                              txo_p_str(payload_json), deadline_param(def)};
    trace_params(trace, tp, &pi[5]);
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, SAGA_SQL_INSERT_INSTANCE, pi, TXO_ARRAY_LEN(pi), &res, err);
    if (rc != 0) {
        txo_error_wrap(err, "creating saga %s %s", def->type, correlation_id);
        return rc;
    }
    if (res.affected_rows == 1) {
        rc = insert_steps(tx, def, id, err);
        if (rc != 0) {
            txo_error_wrap(err, "creating the steps of saga %s", id);
            return rc;
        }
        memcpy(saga_id, id, TXO_SAGA_ID_LEN);
        if (created != NULL)
            *created = true;
        return 0;
    }
    struct txo_param pf[] = {txo_p_str(def->type), txo_p_str(correlation_id)};
    struct txo_rows *rows = NULL;
    rc = txo_tx_query(tx, SAGA_SQL_FIND_ID, pf, TXO_ARRAY_LEN(pf), &rows, err);
    if (rc != 0)
        return rc;
    const char *found = txo_rows_count(rows) == 1 ? txo_rows_str(rows, 0, 0, NULL) : NULL;
    if (found == NULL || strlen(found) >= TXO_SAGA_ID_LEN) {
        rc = txo_error_set(err, TXO_EDB, "saga %s %s: exists but cannot be read back", def->type,
                           correlation_id);
    } else {
        snprintf(saga_id, TXO_SAGA_ID_LEN, "%s", found);
        if (created != NULL)
            *created = false;
    }
    txo_rows_free(rows);
    return rc;
}

/* The steps of the sagas made[0..m) (indexes into sagas), in one statement. */
static int insert_steps_many(struct txo_tx *tx, const struct txo_saga_def *def,
                             const struct txo_saga_new *sagas, const size_t *made, size_t m,
                             struct txo_error *err)
{
    size_t rows = m * def->n_steps;
    char *sql = txo_sql_values_rows(SAGA_SQL_INSERT_STEPS, rows, SAGA_SQL_INSERT_STEPS_ROW);
    struct txo_param *ps = txo_calloc(3 * rows, sizeof(*ps));
    int rc = 0;
    if (sql == NULL || ps == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "creating the steps of %zu sagas: out of memory", m);
        goto out;
    }
    size_t np = 0;
    for (size_t k = 0; k < m; k++)
        for (size_t i = 0; i < def->n_steps; i++) {
            ps[np++] = txo_p_str(sagas[made[k]].saga_id);
            ps[np++] = txo_p_i64((int64_t)i + 1);
            ps[np++] = txo_p_str(def->steps[i].name);
        }
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, sql, ps, np, &res, err);
    if (rc == 0 && res.affected_rows != rows)
        rc = txo_error_set(err, TXO_EDB, "%llu of %zu saga steps created",
                           (unsigned long long)res.affected_rows, rows);
out:
    txo_free(sql);
    txo_free(ps);
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
        sagas[k].saga_id[0] = '\0';
        sagas[k].created = false;
    }
    size_t padded = txo_sql_in_list_size(n);
    char *find = txo_sql_in_list(SAGA_SQL_FIND_MANY, padded, "");
    char *insert = txo_sql_values_rows(SAGA_SQL_INSERT_INSTANCES, n, SAGA_SQL_INSERT_INSTANCES_ROW);
    struct txo_param *p = txo_calloc(7 * n + padded + 1, sizeof(*p));
    char(*tps)[TXO_TRACEPARENT_LEN + 1] = txo_calloc(n, sizeof(*tps));
    size_t *made = txo_calloc(n, sizeof(*made));
    struct txo_rows *rows = NULL;
    if (find == NULL || insert == NULL || p == NULL || tps == NULL || made == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "creating %zu sagas %s: out of memory", n, def->type);
        goto out;
    }
    p[0] = txo_p_str(def->type);
    for (size_t k = 0; k < padded; k++)
        p[1 + k] = txo_p_str(sagas[k < n ? k : n - 1].correlation_id);
    rc = txo_tx_query(tx, find, p, 1 + padded, &rows, err);
    if (rc != 0)
        goto out;
    for (size_t r = 0; r < txo_rows_count(rows); r++) {
        const char *c = txo_rows_str(rows, r, 0, NULL);
        const char *id = txo_rows_str(rows, r, 1, NULL);
        for (size_t k = 0; c != NULL && id != NULL && k < n; k++)
            if (strcmp(sagas[k].correlation_id, c) == 0)
                snprintf(sagas[k].saga_id, TXO_SAGA_ID_LEN, "%s", id);
    }
    size_t m = 0, np = 0;
    for (size_t k = 0; k < n; k++) {
        if (sagas[k].saga_id[0] != '\0')
            continue; /* exists (or given earlier in this list) */
        uuid_t uuid;
        uuid_generate_random(uuid);
        uuid_unparse_lower(uuid, sagas[k].saga_id);
        sagas[k].created = true;
        made[m++] = k;
        p[np++] = txo_p_str(sagas[k].saga_id);
        p[np++] = txo_p_str(def->type);
        p[np++] = txo_p_str(sagas[k].correlation_id);
        p[np++] = txo_p_str(sagas[k].payload_json);
        p[np++] = deadline_param(def);
        trace_params(sagas[k].trace, tps[k], &p[np]);
        np += 2;
        for (size_t j = k + 1; j < n; j++)
            if (strcmp(sagas[j].correlation_id, sagas[k].correlation_id) == 0)
                memcpy(sagas[j].saga_id, sagas[k].saga_id, TXO_SAGA_ID_LEN);
    }
    if (m == 0)
        goto out;
    txo_free(insert);
    insert = txo_sql_values_rows(SAGA_SQL_INSERT_INSTANCES, m, SAGA_SQL_INSERT_INSTANCES_ROW);
    struct txo_exec_result res;
    rc = insert != NULL ? txo_tx_exec(tx, insert, p, np, &res, err)
                        : txo_error_set(err, TXO_ENOMEM, "creating sagas: out of memory");
    if (rc == 0 && res.affected_rows != m)
        rc = txo_error_set(err, TXO_EDB, "%llu of %zu sagas %s created",
                           (unsigned long long)res.affected_rows, m, def->type);
    if (rc == 0)
        rc = insert_steps_many(tx, def, sagas, made, m, err);
    if (rc != 0)
        txo_error_wrap(err, "creating %zu sagas %s", m, def->type);
out:
    txo_rows_free(rows);
    txo_free(find);
    txo_free(insert);
    txo_free(p);
    txo_free(tps);
    txo_free(made);
    return rc;
}
