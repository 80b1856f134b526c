/*
 * Reading sagas without driving them: `txo saga show`, GET /sagas/{id}, the metrics, and the
 * workers' polls for due work (include/txo/saga.h). Nothing here takes a lease or writes.
 *
 * Thread-safety: every function uses only the db it is given.
 */
#include "core/common.h"
#include "core/text.h"

#include "saga/saga_internal.h"
#include "saga/saga_sql.h"

/* Columns of SAGA_SQL_SELECT_INSTANCE and SAGA_SQL_SELECT_STEPS. */
enum inst_col {
    INST_ID,
    INST_TYPE,
    INST_CORRELATION,
    INST_STATUS,
    INST_PAYLOAD,
    INST_OWNER,
    INST_IDLE,
    INST_COMPENSATION_TRIES,
    INST_RETRY_SCHEDULED,
    INST_DEADLINE,
    INST_CREATED,
    INST_UPDATED,
};
enum step_col {
    STEP_ORDER,
    STEP_NAME,
    STEP_STATUS,
    STEP_ERROR,
    STEP_ATTEMPTS,
    STEP_ERROR_CODE,
    STEP_REMOTE,
    STEP_DEADLINE,
};
/* Columns of SAGA_SQL_LIST_* and SAGA_SQL_COUNT_BY_STATUS. */
enum due_col { DUE_ID, DUE_TYPE };
enum count_col { COUNT_STATUS, COUNT_N, COUNT_ABANDONED };
enum stuck_col {
    STUCK_ID,
    STUCK_TYPE,
    STUCK_STATUS,
    STUCK_IDLE,
    STUCK_DEADLINE, /* "try", "step", "saga"; NULL: none passed */
    STUCK_STEP,     /* the step being tried; NULL between steps */
    STUCK_OVERDUE,  /* seconds since that deadline passed */
};

static int parse_saga_status(const char *id, const char *name, enum txo_saga_status *out,
                             struct txo_error *err)
{
    if (txo_saga_status_parse(name, out) != 0)
        return txo_error_set(err, TXO_EDB, "saga %s: unknown status '%s'", id,
                             name != NULL ? name : "NULL");
    return 0;
}

struct load_tx {
    const char *id;
    struct txo_rows *inst;
    struct txo_rows *steps;
};

static int load_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct load_tx *a = arg;
    txo_rows_free(a->inst);
    txo_rows_free(a->steps);
    a->inst = NULL;
    a->steps = NULL;
    struct txo_param p[] = {txo_p_str(a->id)};
    int rc = txo_tx_query(tx, SAGA_SQL_SELECT_INSTANCE, p, TXO_ARRAY_LEN(p), &a->inst, err);
    if (rc == 0) {
        rc = txo_tx_query(tx, SAGA_SQL_SELECT_STEPS, p, TXO_ARRAY_LEN(p), &a->steps, err);
    }
    return rc;
}

int txo_saga_load(struct txo_db *db, const char *saga_id, struct txo_saga_info *out,
                  struct txo_error *err)
{
    if (db == NULL || saga_id == NULL || out == NULL) {
        return txo_error_set(err, TXO_EINVAL, "saga load: missing argument");
    }
    struct txo_saga_info info;
    memset(&info, 0, sizeof(info));
    struct load_tx a = {.id = saga_id};
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, load_tx_fn, &a, err);
    if (rc != 0) {
        goto out;
    }
    if (txo_rows_count(a.inst) != 1) {
        rc = txo_error_set(err, TXO_ENOTFOUND, "saga %s not found", saga_id);
        goto out;
    }
    snprintf(info.id, sizeof(info.id), "%s", txo_rows_str(a.inst, 0, INST_ID, NULL));
    rc = parse_saga_status(saga_id, txo_rows_str(a.inst, 0, INST_STATUS, NULL), &info.status, err);
    if (rc != 0) {
        goto out;
    }
    info.type = txo_strdup(txo_rows_str(a.inst, 0, INST_TYPE, NULL));
    info.correlation_id = txo_strdup(txo_rows_str(a.inst, 0, INST_CORRELATION, NULL));
    info.payload = txo_strdup(txo_rows_str(a.inst, 0, INST_PAYLOAD, NULL));
    bool oom = info.type == NULL || info.correlation_id == NULL || info.payload == NULL;
    info.idle_s = txo_rows_i64(a.inst, 0, INST_IDLE);
    info.compensation_tries = (unsigned)txo_rows_i64(a.inst, 0, INST_COMPENSATION_TRIES);
    info.retry_scheduled = txo_rows_i64(a.inst, 0, INST_RETRY_SCHEDULED) == 1;
    if (!txo_rows_is_null(a.inst, 0, INST_DEADLINE))
        txo__text_rfc3339(txo_rows_str(a.inst, 0, INST_DEADLINE, NULL), info.deadline_at);
    txo__text_rfc3339(txo_rows_str(a.inst, 0, INST_CREATED, NULL), info.created_at);
    txo__text_rfc3339(txo_rows_str(a.inst, 0, INST_UPDATED, NULL), info.updated_at);
    if (!txo_rows_is_null(a.inst, 0, INST_OWNER)) {
        info.owner = txo_strdup(txo_rows_str(a.inst, 0, INST_OWNER, NULL));
        oom = oom || info.owner == NULL;
    }
    size_t n = txo_rows_count(a.steps);
    if (n > 0) {
        info.steps = txo_calloc(n, sizeof(*info.steps));
        oom = oom || info.steps == NULL;
    }
    for (size_t i = 0; !oom && i < n; i++) {
        struct txo_saga_step_info *s = &info.steps[i];
        info.n_steps = i + 1;
        s->step_order = (unsigned)txo_rows_i64(a.steps, i, STEP_ORDER);
        s->attempts = (unsigned)txo_rows_i64(a.steps, i, STEP_ATTEMPTS);
        s->error_code = (int)txo_rows_i64(a.steps, i, STEP_ERROR_CODE);
        s->name = txo_strdup(txo_rows_str(a.steps, i, STEP_NAME, NULL));
        if (!txo_rows_is_null(a.steps, i, STEP_DEADLINE))
            txo__text_rfc3339(txo_rows_str(a.steps, i, STEP_DEADLINE, NULL), s->deadline_at);
        oom = s->name == NULL;
        if (!txo_rows_is_null(a.steps, i, STEP_ERROR)) {
            s->error = txo_strdup(txo_rows_str(a.steps, i, STEP_ERROR, NULL));
            oom = oom || s->error == NULL;
        }
        const char *st = txo_rows_str(a.steps, i, STEP_STATUS, NULL);
        const char *remote = txo_rows_str(a.steps, i, STEP_REMOTE, NULL);
        if (txo_step_status_parse(st, &s->status) != 0 ||
            txo__remote_state_parse(remote, &s->remote) != 0) {
            rc = txo_error_set(err, TXO_EDB, "saga %s step %u: unknown status '%s'", saga_id,
                               s->step_order, st != NULL ? st : "NULL");
            goto out;
        }
    }
    if (oom) {
        rc = txo_error_set(err, TXO_ENOMEM, "saga %s: out of memory loading it", saga_id);
    }
out:
    txo_rows_free(a.inst);
    txo_rows_free(a.steps);
    if (rc == 0) {
        *out = info;
    } else {
        txo_saga_info_release(&info);
    }
    return rc;
}

void txo_saga_info_release(struct txo_saga_info *info)
{
    if (info == NULL) {
        return;
    }
    for (size_t i = 0; i < info->n_steps; i++) {
        txo_free(info->steps[i].name);
        txo_free(info->steps[i].error);
    }
    txo_free(info->steps);
    txo_free(info->type);
    txo_free(info->correlation_id);
    txo_free(info->payload);
    txo_free(info->owner);
    memset(info, 0, sizeof(*info));
}

int txo_saga_find(struct txo_db *db, const char *type, const char *correlation_id,
                  char saga_id[TXO_SAGA_ID_LEN], struct txo_error *err)
{
    if (db == NULL || type == NULL || correlation_id == NULL) {
        return txo_error_set(err, TXO_EINVAL, "saga find: missing argument");
    }
    struct txo_param p[] = {txo_p_str(type), txo_p_str(correlation_id)};
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, SAGA_SQL_FIND_ID, p, TXO_ARRAY_LEN(p), &rows, err);
    if (rc != 0) {
        return rc;
    }
    const char *id = txo_rows_count(rows) == 1 ? txo_rows_str(rows, 0, 0, NULL) : NULL;
    if (id == NULL || strlen(id) >= TXO_SAGA_ID_LEN) {
        rc = txo_error_set(err, TXO_ENOTFOUND, "no saga %s with correlation id %s", type,
                           correlation_id);
    } else {
        snprintf(saga_id, TXO_SAGA_ID_LEN, "%s", id);
    }
    txo_rows_free(rows);
    return rc;
}

int txo_saga_count(struct txo_db *db, struct txo_saga_counts *out, struct txo_error *err)
{
    if (db == NULL || out == NULL)
        return txo_error_set(err, TXO_EINVAL, "saga count: missing argument");
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, SAGA_SQL_COUNT_BY_STATUS, NULL, 0, &rows, err);
    if (rc != 0)
        return rc;
    struct txo_saga_counts c;
    memset(&c, 0, sizeof(c));
    for (size_t i = 0; i < txo_rows_count(rows); i++) {
        enum txo_saga_status s;
        rc = parse_saga_status("-", txo_rows_str(rows, i, COUNT_STATUS, NULL), &s, err);
        if (rc != 0)
            goto out;
        int64_t v = txo_rows_i64(rows, i, COUNT_N);
        c.by_status[s] = v > 0 ? (uint64_t)v : 0;
        int64_t a = txo_rows_i64(rows, i, COUNT_ABANDONED);
        c.abandoned += a > 0 ? (uint64_t)a : 0;
    }
    *out = c;
out:
    txo_rows_free(rows);
    return rc;
}

/*
 * Starts ref, zeroed, from row i: its id and type (columns id_col and type_col). False when
 * either is NULL or too long for a ref, as no saga's can be: such a row is passed over.
 */
static bool ref_from_row(const struct txo_rows *rows, size_t i, size_t id_col, size_t type_col,
                         struct txo_saga_ref *ref)
{
    const char *id = txo_rows_str(rows, i, id_col, NULL);
    const char *type = txo_rows_str(rows, i, type_col, NULL);
    memset(ref, 0, sizeof(*ref));
    if (id == NULL || type == NULL || strlen(id) >= TXO_SAGA_ID_LEN ||
        strlen(type) > TXO_SAGA_TYPE_MAX)
        return false;
    snprintf(ref->id, sizeof(ref->id), "%s", id);
    snprintf(ref->type, sizeof(ref->type), "%s", type);
    return true;
}

int txo_saga_list_due(struct txo_db *db, enum txo_saga_status status, size_t max,
                      struct txo_saga_ref *out, size_t *n, struct txo_error *err)
{
    bool resume = status == TXO_SAGA_RUNNING || status == TXO_SAGA_COMPENSATING;
    if (db == NULL || n == NULL || (out == NULL && max > 0) ||
        !(resume || status == TXO_SAGA_COMPENSATION_FAILED) || max > INT32_MAX)
        return txo_error_set(err, TXO_EINVAL, "saga list due: bad argument (status %s)",
                             txo_saga_status_name(status));
    *n = 0;
    if (max == 0)
        return 0;
    struct txo_param p[] = {txo_p_str(txo_saga_status_name(status)), txo_p_i64((int64_t)max)};
    struct txo_rows *rows = NULL;
    int rc = resume ? txo_db_query(db, SAGA_SQL_LIST_UNOWNED, p, 2, &rows, err)
                    : txo_db_query(db, SAGA_SQL_LIST_RETRY_DUE, p + 1, 1, &rows, err);
    if (rc != 0)
        return rc;
    size_t k = 0;
    for (size_t i = 0; i < txo_rows_count(rows) && k < max; i++) {
        if (!ref_from_row(rows, i, DUE_ID, DUE_TYPE, &out[k]))
            continue;
        out[k].status = status;
        k++;
    }
    *n = k;
    txo_rows_free(rows);
    return 0;
}

/* Runs a query whose columns are enum stuck_col and fills out[0..*n) with its rows. */
static int list_refs(struct txo_db *db, const char *sql, const struct txo_param *p, size_t n_p,
                     size_t max, struct txo_saga_ref *out, size_t *n, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, sql, p, n_p, &rows, err);
    if (rc != 0)
        return rc;
    size_t k = 0;
    for (size_t i = 0; i < txo_rows_count(rows) && k < max; i++) {
        if (!ref_from_row(rows, i, STUCK_ID, STUCK_TYPE, &out[k]) ||
            txo_saga_status_parse(txo_rows_str(rows, i, STUCK_STATUS, NULL), &out[k].status) != 0)
            continue;
        out[k].idle_s = txo_rows_i64(rows, i, STUCK_IDLE);
        const char *kind = txo_rows_str(rows, i, STUCK_DEADLINE, NULL);
        for (int d = TXO_DEADLINE_TRY; kind != NULL && d <= TXO_DEADLINE_SAGA; d++)
            if (strcmp(kind, txo_saga_deadline_name((enum txo_saga_deadline)d)) == 0)
                out[k].deadline = (enum txo_saga_deadline)d;
        if (out[k].deadline != TXO_DEADLINE_NONE) {
            const char *step = txo_rows_str(rows, i, STUCK_STEP, NULL);
            snprintf(out[k].step, sizeof(out[k].step), "%s", step != NULL ? step : "");
            out[k].overdue_s = txo_rows_i64(rows, i, STUCK_OVERDUE);
        }
        k++;
    }
    *n = k;
    txo_rows_free(rows);
    return 0;
}

int txo_saga_list_stuck(struct txo_db *db, unsigned idle_s, size_t max, struct txo_saga_ref *out,
                        size_t *n, struct txo_error *err)
{
    if (db == NULL || n == NULL || (out == NULL && max > 0) || max > INT32_MAX)
        return txo_error_set(err, TXO_EINVAL, "saga list stuck: bad argument");
    *n = 0;
    if (max == 0)
        return 0;
    struct txo_param p[] = {txo_p_i64(idle_s), txo_p_i64((int64_t)max)};
    return list_refs(db, SAGA_SQL_LIST_STUCK, p, TXO_ARRAY_LEN(p), max, out, n, err);
}

int txo_saga_list_compensation_failed(struct txo_db *db, size_t max, struct txo_saga_ref *out,
                                      size_t *n, struct txo_error *err)
{
    if (db == NULL || n == NULL || (out == NULL && max > 0) || max > INT32_MAX)
        return txo_error_set(err, TXO_EINVAL, "saga list compensation failed: bad argument");
    *n = 0;
    if (max == 0)
        return 0;
    struct txo_param p[] = {txo_p_i64((int64_t)max)};
    return list_refs(db, SAGA_SQL_LIST_COMPENSATION_FAILED, p, TXO_ARRAY_LEN(p), max, out, n, err);
}
