/*
 * The process registry: which txo daemons are running against a database, and what state
 * their circuit breakers are in, for operators (the dashboard, GET /processes). The other
 * modules' tables say what work there is; only the processes themselves know that they are
 * alive and whether a service they call is cut off, so each one tells the database.
 *
 * Each daemon (relay, worker, serve, up) owns one row of txo_processes
 * (sql/migrations/0013_processes.sql), keyed by its owner name ("host:pid:role",
 * include/txo/owner.h):
 *   start      txo_heartbeat_start(): a thread of its own, with a connection of its own,
 *              inserts the row at once and then updates heartbeat_at and status every
 *              interval_ms (one UPDATE by primary key, in a transaction of its own: never inside
 *              anyone else's, and holding no lock beyond that row);
 *   status     a small JSON document, {"breakers":{"payment":"closed","nats":"open"}}, built
 *              from what the daemon's status callback reports at each beat;
 *   stop       txo_heartbeat_stop() deletes the row: a process that stops cleanly disappears;
 *   crash      the row stays and its heartbeat ages: txo_registry_list() reports it as not
 *              alive once it is older than the liveness window, and the heartbeats of the
 *              processes still running delete rows stale for longer than stale_purge_s.
 *
 * The heartbeat never makes its daemon fail: when the database is away or the table is
 * missing (a relay-only database migrated with `txo migrate --only outbox`) it logs one line,
 * tries again at the next beat, and logs one more line when it works again.
 *
 * Thread-safety: the txo_registry_* functions use only the db they are given. A heartbeat runs
 * its own thread; txo_heartbeat_stop() must be called once, from any one thread.
 */
#ifndef TXO_REGISTRY_H
#define TXO_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/breaker.h"
#include "txo/clock.h"
#include "txo/common.h"
#include "txo/db.h"

/* Sizes of the text columns of txo_processes, NUL excluded. */
#define TXO_REGISTRY_OWNER_MAX   255
#define TXO_REGISTRY_ROLE_MAX    32
#define TXO_REGISTRY_VERSION_MAX 64
/* Most rows one txo_registry_list() call returns (the busiest first: the newest beats). */
#define TXO_REGISTRY_LIST_MAX 1000

/* Who a process is: what it registers. */
struct txo_process_id {
    const char *owner;   /* "host:pid:role", unique among the running processes */
    const char *role;    /* "relay", "worker", "serve", "up" */
    const char *host;    /* the host name */
    int64_t pid;         /* the process id on that host */
    const char *version; /* the txo version the process runs */
};

/*
 * Fills id for the calling process: owner "<hostname>:<pid>:<role>", host, pid; role and
 * version are stored as given (borrowed). owner and host are written into the caller's
 * buffers (owner_cap and host_cap bytes). Errors: TXO_EINVAL (a NULL argument, an empty or
 * over-long role, a name that does not fit).
 */
TXO_API TXO_MUST_CHECK int txo_registry_self(const char *role, const char *version, char *owner,
                                             size_t owner_cap, char *host, size_t host_cap,
                                             struct txo_process_id *id, struct txo_error *err);

/*
 * Inserts (or, for an owner already there, replaces) the process's row with started_at and
 * heartbeat_at now and status_json (a JSON text; NULL is "{}"). Errors: TXO_EINVAL (a
 * missing field, a field longer than its column), TXO_ENOTFOUND (txo_processes does not
 * exist: run `txo migrate`), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_registry_register(struct txo_db *db, const struct txo_process_id *id,
                                                 const char *status_json, struct txo_error *err);

/*
 * One heartbeat: heartbeat_at = now and status = status_json (NULL is "{}") on owner's row, by
 * primary key. *found (may be NULL) is false when the row is not there (it was purged while
 * the process was cut off from the database): register again. Errors: TXO_EINVAL,
 * TXO_ENOTFOUND (no table), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_registry_heartbeat(struct txo_db *db, const char *owner,
                                                  const char *status_json, bool *found,
                                                  struct txo_error *err);

/* Deletes owner's row (a clean stop). No row is not an error. Errors: TXO_EINVAL,
 * TXO_ENOTFOUND (no table), DB errors. */
TXO_API TXO_MUST_CHECK int txo_registry_unregister(struct txo_db *db, const char *owner,
                                                   struct txo_error *err);

/*
 * Deletes the rows whose last heartbeat is older than stale_s seconds, at most 100 per call
 * (*deleted, may be NULL, receives how many). Errors: TXO_EINVAL (stale_s 0), TXO_ENOTFOUND
 * (no table), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_registry_purge(struct txo_db *db, unsigned stale_s,
                                              uint64_t *deleted, struct txo_error *err);

/* A registered process, as txo_registry_list() reports it. */
struct txo_process {
    char owner[TXO_REGISTRY_OWNER_MAX + 1];
    char role[TXO_REGISTRY_ROLE_MAX + 1];
    char host[TXO_REGISTRY_OWNER_MAX + 1];
    int64_t pid;
    char version[TXO_REGISTRY_VERSION_MAX + 1];
    char started_at[TXO_RFC3339_LEN];   /* RFC 3339 UTC, "2026-12-01T12:00:00.123456Z" */
    char heartbeat_at[TXO_RFC3339_LEN]; /* same format: the last heartbeat */
    double heartbeat_age_s;             /* seconds since the last heartbeat (database clock) */
    bool alive;                         /* the last heartbeat is within the liveness window */
    char *status;                       /* the JSON text of the last heartbeat */
};

/*
 * Lists the registered processes, newest heartbeat first, at most TXO_REGISTRY_LIST_MAX:
 * alive when their last heartbeat is at most alive_s seconds old (a few heartbeat
 * intervals), stale otherwise. *out is an array of *n entries (NULL when *n is 0), freed with
 * txo_processes_free(). Errors: TXO_EINVAL (alive_s 0), TXO_ENOTFOUND (no table), TXO_ENOMEM,
 * DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_registry_list(struct txo_db *db, unsigned alive_s,
                                             struct txo_process **out, size_t *n,
                                             struct txo_error *err);

/* Frees the array of n processes from txo_registry_list(). NULL is a no-op. */
TXO_API void txo_processes_free(struct txo_process *p, size_t n);

/* ---- the heartbeat thread of a daemon ---- */

/* One circuit breaker's state, as a status callback reports it. */
struct txo_heartbeat_breaker {
    const char *name; /* "payment"; must stay valid until the callback's next call */
    enum txo_breaker_state state;
};

/*
 * Called by the heartbeat thread at each beat: writes up to cap breakers into out and returns
 * how many. Runs on the heartbeat thread, concurrently with the daemon's own threads: it must
 * be thread-safe and quick (txo_breaker_state() and txo_relay_breaker_state() are).
 */
typedef size_t (*txo_heartbeat_status_fn)(void *arg, struct txo_heartbeat_breaker *out, size_t cap);

struct txo_heartbeat_opts {
    const char *role;                 /* required: "relay", "worker", "serve", "up" */
    const char *version;              /* required: the txo version */
    unsigned interval_ms;             /* between beats; default 5000 */
    unsigned stale_purge_s;           /* rows older than this are deleted; default 21600 (6 h) */
    txo_heartbeat_status_fn breakers; /* NULL: the status has no breakers */
    void *breakers_arg;
};

/* Sets the defaults above (role and version NULL). */
TXO_API void txo_heartbeat_opts_init(struct txo_heartbeat_opts *opts);

struct txo_heartbeat;

/*
 * Starts the heartbeat thread for the calling process (owner "<host>:<pid>:<role>"). opts is
 * copied with its strings; db_opts is copied but its strings are borrowed and must outlive the
 * heartbeat (as for a pool). The thread opens its own connection and registers at once. Nothing
 * here waits for the database: a database that is down only delays the first beat. Errors:
 * TXO_EINVAL (no role or version, a role too long), TXO_ENOMEM, TXO_EIO (no thread).
 */
TXO_API TXO_MUST_CHECK int txo_heartbeat_start(const struct txo_db_opts *db_opts,
                                               const struct txo_heartbeat_opts *opts,
                                               struct txo_heartbeat **out, struct txo_error *err);

/* The owner name the heartbeat registers under. Valid until txo_heartbeat_stop(). */
TXO_API const char *txo_heartbeat_owner(const struct txo_heartbeat *hb);

/*
 * Stops the thread (a beat in progress finishes first), deletes the process's row (a failure
 * is logged: the row then ages out like a crashed process's), closes the connection and frees
 * hb. NULL is a no-op.
 */
TXO_API void txo_heartbeat_stop(struct txo_heartbeat *hb);

#endif
