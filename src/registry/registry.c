/*
 * The process registry (include/txo/registry.h): the rows of txo_processes, and the heartbeat
 * thread each daemon runs to keep its own row fresh. This module is the only one that touches
 * txo_processes; the admin API and the tools read it through txo_registry_list().
 *
 * Thread-safety: the txo_registry_* functions use only the db they are given. A heartbeat's
 * fields are written before its thread starts and read-only afterwards, except `stopping`,
 * which is guarded by its mutex.
 */
#include "core/common.h"

#include <jansson.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "core/text.h"
#include "core/waiter.h"
#include "registry/registry_sql.h"
#include "txo/registry.h"

/* Columns of REGISTRY_SQL_LIST. */
enum list_col {
    COL_OWNER,
    COL_ROLE,
    COL_HOST,
    COL_PID,
    COL_VERSION,
    COL_STARTED,
    COL_HEARTBEAT,
    COL_AGE,
    COL_ALIVE,
    COL_STATUS,
};

static const char TABLE[] = "txo_processes";

/*
 * After a failed statement: when the table is not there, the error becomes TXO_ENOTFOUND with
 * a message that says what to do; any other failure (or a failed check) is returned as it was.
 */
static int table_missing_or(struct txo_db *db, int rc, struct txo_error *err)
{
    bool exists = true;
    struct txo_error check;
    txo_error_init(&check);
    if (txo_schema_has_table(db, TABLE, &exists, &check) == 0 && !exists)
        return txo_error_set(err, TXO_ENOTFOUND,
                             "table %s does not exist (run `txo migrate` without --only)", TABLE);
    return rc;
}

/* Runs one statement of the registry; *affected (may be NULL) gets the rows it changed. */
static int exec(struct txo_db *db, const char *sql, const struct txo_param *p, size_t n,
                uint64_t *affected, struct txo_error *err)
{
    struct txo_exec_result res = {0, 0};
    int rc = txo_db_exec(db, sql, p, n, &res, err);
    if (rc != 0)
        return table_missing_or(db, rc, err);
    if (affected != NULL)
        *affected = res.affected_rows;
    return 0;
}

static bool fits(const char *s, size_t max)
{
    return s != NULL && s[0] != '\0' && strlen(s) <= max;
}

int txo_registry_self(const char *role, const char *version, char *owner, size_t owner_cap,
                      char *host, size_t host_cap, struct txo_process_id *id, struct txo_error *err)
{
    if (owner == NULL || host == NULL || id == NULL || version == NULL ||
        !fits(role, TXO_REGISTRY_ROLE_MAX))
        return txo_error_set(err, TXO_EINVAL, "registry self: missing argument or bad role");
    if (txo_owner_name(owner, owner_cap, role) != 0)
        return txo_error_set(err, TXO_EINVAL, "registry self: the owner name does not fit");
    char name[256];
    if (gethostname(name, sizeof(name)) != 0 || name[0] == '\0')
        snprintf(name, sizeof(name), "localhost");
    name[sizeof(name) - 1] = '\0'; /* gethostname() need not terminate a cut name */
    int n = snprintf(host, host_cap, "%s", name);
    if (n < 0 || (size_t)n >= host_cap)
        return txo_error_set(err, TXO_EINVAL, "registry self: the host name does not fit");
    id->owner = owner;
    id->role = role;
    id->host = host;
    id->pid = (int64_t)getpid();
    id->version = version;
    return 0;
}

int txo_registry_register(struct txo_db *db, const struct txo_process_id *id,
                          const char *status_json, struct txo_error *err)
{
    if (db == NULL || id == NULL || !fits(id->owner, TXO_REGISTRY_OWNER_MAX) ||
        !fits(id->role, TXO_REGISTRY_ROLE_MAX) || !fits(id->host, TXO_REGISTRY_OWNER_MAX) ||
        !fits(id->version, TXO_REGISTRY_VERSION_MAX))
        return txo_error_set(err, TXO_EINVAL,
                             "registry register: a field is missing or longer than its column");
    struct txo_param p[] = {txo_p_str(id->owner),   txo_p_str(id->role),
                            txo_p_str(id->host),    txo_p_i64(id->pid),
                            txo_p_str(id->version), txo_p_str(status_json ? status_json : "{}")};
    return exec(db, REGISTRY_SQL_REGISTER, p, TXO_ARRAY_LEN(p), NULL, err);
}

int txo_registry_heartbeat(struct txo_db *db, const char *owner, const char *status_json,
                           bool *found, struct txo_error *err)
{
    if (db == NULL || !fits(owner, TXO_REGISTRY_OWNER_MAX))
        return txo_error_set(err, TXO_EINVAL, "registry heartbeat: missing argument");
    struct txo_param p[] = {txo_p_str(status_json ? status_json : "{}"), txo_p_str(owner)};
    uint64_t changed = 0;
    int rc = exec(db, REGISTRY_SQL_HEARTBEAT, p, TXO_ARRAY_LEN(p), &changed, err);
    if (rc == 0 && found != NULL)
        *found = changed > 0; /* heartbeat_at always changes: 1 when the row exists */
    return rc;
}

int txo_registry_unregister(struct txo_db *db, const char *owner, struct txo_error *err)
{
    if (db == NULL || !fits(owner, TXO_REGISTRY_OWNER_MAX))
        return txo_error_set(err, TXO_EINVAL, "registry unregister: missing argument");
    struct txo_param p[] = {txo_p_str(owner)};
    return exec(db, REGISTRY_SQL_UNREGISTER, p, TXO_ARRAY_LEN(p), NULL, err);
}

int txo_registry_purge(struct txo_db *db, unsigned stale_s, uint64_t *deleted,
                       struct txo_error *err)
{
    if (db == NULL || stale_s == 0)
        return txo_error_set(err, TXO_EINVAL, "registry purge: missing argument or stale_s 0");
    struct txo_param p[] = {txo_p_i64(stale_s)};
    return exec(db, REGISTRY_SQL_PURGE, p, TXO_ARRAY_LEN(p), deleted, err);
}

static void copy_col(const struct txo_rows *rows, size_t i, size_t col, char *out, size_t cap)
{
    const char *s = txo_rows_str(rows, i, col, NULL);
    snprintf(out, cap, "%s", s != NULL ? s : "");
}

int txo_registry_list(struct txo_db *db, unsigned alive_s, struct txo_process **out, size_t *n,
                      struct txo_error *err)
{
    if (db == NULL || out == NULL || n == NULL || alive_s == 0)
        return txo_error_set(err, TXO_EINVAL, "registry list: missing argument or alive_s 0");
    *out = NULL;
    *n = 0;
    struct txo_param p[] = {txo_p_i64(alive_s), txo_p_i64(TXO_REGISTRY_LIST_MAX)};
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, REGISTRY_SQL_LIST, p, TXO_ARRAY_LEN(p), &rows, err);
    if (rc != 0)
        return table_missing_or(db, rc, err);
    size_t count = txo_rows_count(rows);
    struct txo_process *ps = count > 0 ? txo_calloc(count, sizeof(*ps)) : NULL;
    if (count > 0 && ps == NULL) {
        txo_rows_free(rows);
        return txo_error_set(err, TXO_ENOMEM, "registry list: %zu processes", count);
    }
    for (size_t i = 0; i < count; i++) {
        struct txo_process *q = &ps[i];
        copy_col(rows, i, COL_OWNER, q->owner, sizeof(q->owner));
        copy_col(rows, i, COL_ROLE, q->role, sizeof(q->role));
        copy_col(rows, i, COL_HOST, q->host, sizeof(q->host));
        copy_col(rows, i, COL_VERSION, q->version, sizeof(q->version));
        q->pid = txo_rows_i64(rows, i, COL_PID);
        txo__text_rfc3339(txo_rows_str(rows, i, COL_STARTED, NULL), q->started_at);
        txo__text_rfc3339(txo_rows_str(rows, i, COL_HEARTBEAT, NULL), q->heartbeat_at);
        q->heartbeat_age_s = txo_rows_f64(rows, i, COL_AGE);
        q->alive = txo_rows_i64(rows, i, COL_ALIVE) == 1;
        const char *status = txo_rows_str(rows, i, COL_STATUS, NULL);
        q->status = txo_strdup(status != NULL ? status : "{}");
        if (q->status == NULL) {
            txo_processes_free(ps, i);
            txo_rows_free(rows);
            return txo_error_set(err, TXO_ENOMEM, "registry list: status of %s", q->owner);
        }
    }
    txo_rows_free(rows);
    *out = ps;
    *n = count;
    return 0;
}

void txo_processes_free(struct txo_process *p, size_t n)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        txo_free(p[i].status);
    txo_free(p);
}

/* ---- the heartbeat thread ---- */

#define MAX_BREAKERS 16

struct txo_heartbeat {
    struct txo_db_opts db_opts; /* strings borrowed from the caller */
    unsigned interval_ms;
    unsigned stale_purge_s;
    txo_heartbeat_status_fn breakers;
    void *breakers_arg;
    char role[TXO_REGISTRY_ROLE_MAX + 1];
    char version[TXO_REGISTRY_VERSION_MAX + 1];
    char owner[TXO_REGISTRY_OWNER_MAX + 1];
    char host[TXO_REGISTRY_OWNER_MAX + 1];
    struct txo_process_id id;

    /* The thread's own. */
    struct txo_db *db; /* NULL until connected, and after a failure (reopened next beat) */
    bool registered;   /* the row was inserted on this run */
    bool failing;      /* the last beat failed: its one log line was written */
    unsigned beats;    /* since start, for the purge's pace */
    pthread_t thread;

    struct txo__waiter pause; /* between two beats; txo_heartbeat_stop() stops it */
};

void txo_heartbeat_opts_init(struct txo_heartbeat_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->interval_ms = 5000;
    opts->stale_purge_s = 6 * 3600;
}

const char *txo_heartbeat_owner(const struct txo_heartbeat *hb)
{
    return hb->owner;
}

/* {"breakers":{"payment":"closed",...}}, from the daemon's callback. malloc'd (jansson), or
 * NULL when out of memory. */
static char *status_json(struct txo_heartbeat *hb)
{
    json_t *breakers = json_object();
    json_t *doc = json_pack("{s:o}", "breakers", breakers);
    if (doc == NULL)
        return NULL;
    if (hb->breakers != NULL) {
        struct txo_heartbeat_breaker b[MAX_BREAKERS];
        size_t n = hb->breakers(hb->breakers_arg, b, MAX_BREAKERS);
        for (size_t i = 0; i < n && i < MAX_BREAKERS; i++) {
            if (b[i].name == NULL)
                continue;
            char state[16];
            const char *name = txo_breaker_state_name(b[i].state);
            size_t k = 0;
            for (; name[k] != '\0' && k + 1 < sizeof(state); k++)
                state[k] = (char)(name[k] >= 'A' && name[k] <= 'Z' ? name[k] - 'A' + 'a' : name[k]);
            state[k] = '\0';
            json_object_set_new(breakers, b[i].name, json_string(state));
        }
    }
    char *text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(doc);
    return text;
}

/* One beat: connect when needed, register when needed, update, and now and then purge. */
static int beat(struct txo_heartbeat *hb, struct txo_error *err)
{
    int rc = 0;
    if (hb->db == NULL) {
        rc = txo_db_open(&hb->db_opts, &hb->db, err);
        if (rc != 0)
            return rc;
    }
    char *status = status_json(hb);
    if (status == NULL)
        return txo_error_set(err, TXO_ENOMEM, "heartbeat status");
    bool found = false;
    if (hb->registered)
        rc = txo_registry_heartbeat(hb->db, hb->owner, status, &found, err);
    if (rc == 0 && !found) {
        rc = txo_registry_register(hb->db, &hb->id, status, err);
        hb->registered = rc == 0;
    }
    free(status); /* jansson allocates with malloc */
    /* The purge is cheap but not needed at every beat: once a minute or so. */
    if (rc == 0 && hb->beats % 12 == 0) {
        uint64_t deleted = 0;
        rc = txo_registry_purge(hb->db, hb->stale_purge_s, &deleted, err);
        if (rc == 0 && deleted > 0)
            TXO_LOG(TXO_LOG_INFO, "registry", "purged stale processes",
                    TXO_KV_U64("count", deleted), TXO_KV_U64("stale_s", hb->stale_purge_s));
    }
    hb->beats++;
    return rc;
}

static void *heartbeat_main(void *arg)
{
    struct txo_heartbeat *hb = arg;
    do {
        struct txo_error err;
        txo_error_init(&err);
        int rc = beat(hb, &err);
        if (rc != 0 && !hb->failing) {
            /* One line per outage, not one per beat. */
            TXO_LOG(TXO_LOG_WARN, "registry", "heartbeat failed, retrying",
                    TXO_KV_U64("retry_ms", hb->interval_ms), TXO_KV_STR("owner", hb->owner),
                    TXO_KV_STR("code", txo_err_name(rc)), TXO_KV_STR("err", err.msg));
            hb->failing = true;
        } else if (rc == 0 && hb->failing) {
            TXO_LOG(TXO_LOG_INFO, "registry", "heartbeat works again",
                    TXO_KV_STR("owner", hb->owner));
            hb->failing = false;
        }
        if (rc != 0 && rc != TXO_ENOTFOUND && hb->db != NULL) {
            txo_db_close(hb->db); /* a fresh connection at the next beat */
            hb->db = NULL;
            hb->registered = false;
        }
    } while (txo__waiter_wait(&hb->pause, hb->interval_ms, false));
    return NULL;
}

int txo_heartbeat_start(const struct txo_db_opts *db_opts, const struct txo_heartbeat_opts *opts,
                        struct txo_heartbeat **out, struct txo_error *err)
{
    if (db_opts == NULL || opts == NULL || out == NULL ||
        !fits(opts->role, TXO_REGISTRY_ROLE_MAX) ||
        !fits(opts->version, TXO_REGISTRY_VERSION_MAX) || opts->interval_ms == 0 ||
        opts->stale_purge_s == 0)
        return txo_error_set(err, TXO_EINVAL,
                             "heartbeat: role and version are required, intervals must be > 0");
    struct txo_heartbeat *hb = txo_calloc(1, sizeof(*hb));
    if (hb == NULL)
        return txo_error_set(err, TXO_ENOMEM, "heartbeat");
    hb->db_opts = *db_opts;
    hb->interval_ms = opts->interval_ms;
    hb->stale_purge_s = opts->stale_purge_s;
    hb->breakers = opts->breakers;
    hb->breakers_arg = opts->breakers_arg;
    snprintf(hb->role, sizeof(hb->role), "%s", opts->role);
    snprintf(hb->version, sizeof(hb->version), "%s", opts->version);
    int rc = txo_registry_self(hb->role, hb->version, hb->owner, sizeof(hb->owner), hb->host,
                               sizeof(hb->host), &hb->id, err);
    if (rc != 0) {
        txo_free(hb);
        return rc;
    }
    if (txo__waiter_init(&hb->pause) != 0) {
        rc = txo_error_set(err, TXO_EIO, "heartbeat: cannot make its eventfd: %s", strerror(errno));
        txo_free(hb);
        return rc;
    }
    if (pthread_create(&hb->thread, NULL, heartbeat_main, hb) != 0) {
        txo__waiter_destroy(&hb->pause);
        txo_free(hb);
        return txo_error_set(err, TXO_EIO, "heartbeat: cannot start its thread");
    }
    *out = hb;
    return 0;
}

void txo_heartbeat_stop(struct txo_heartbeat *hb)
{
    if (hb == NULL)
        return;
    txo__waiter_stop(&hb->pause);
    pthread_join(hb->thread, NULL);
    if (hb->db != NULL && hb->registered) {
        struct txo_error err;
        txo_error_init(&err);
        if (txo_registry_unregister(hb->db, hb->owner, &err) != 0)
            TXO_LOG(TXO_LOG_WARN, "registry",
                    "could not remove this process's row, it will age out",
                    TXO_KV_STR("owner", hb->owner), TXO_KV_STR("err", err.msg));
    }
    txo_db_close(hb->db);
    txo__waiter_destroy(&hb->pause);
    txo_free(hb);
}
