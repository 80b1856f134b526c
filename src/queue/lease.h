/*
 * Leased claims of work rows (src/queue/lease.c), shared by the outbox relay and the command
 * queue. The statements stay in each module's *_sql.h; this module only runs them in the
 * shape every leased claim has. Private to the library.
 */
#ifndef TXO_QUEUE_LEASE_H
#define TXO_QUEUE_LEASE_H

#include "txo/claim.h"
#include "txo/db.h"

/* Bytes of last_error a module writes (outbox_events and command_queue: TEXT, utf8mb4). */
#define TXO__LEASE_LAST_ERROR_MAX 2000

/* Power-of-two IN-list sizes 1 .. 2^15 that txo__lease_in caches. */
#define TXO__LEASE_IN_LEVELS 16

/* Length of the UUID part of a lock token. */
#define TXO__LEASE_UUID_LEN 36

/*
 * Resolves TXO_CLAIM_AUTO for db into *out: skip-locked when the server has SKIP LOCKED,
 * else update-limit. `who` ("relay", "command queue") starts the error message.
 * Errors: TXO_EINVAL (not a strategy), TXO_EUNSUPPORTED (skip-locked asked for on a server
 * without it).
 */
TXO_MUST_CHECK int txo__lease_strategy(struct txo_db *db, enum txo_claim_strategy want,
                                       const char *who, enum txo_claim_strategy *out,
                                       struct txo_error *err);

/*
 * A fresh lock token into buf (cap bytes): a random UUID, or "<prefix>:<uuid>" when prefix
 * is not NULL, the prefix cut so the token fits. cap must hold at least the UUID and NUL.
 */
void txo__lease_token(char *buf, size_t cap, const char *prefix);

/*
 * A statement that ends in `id IN ` (prefix from a *_sql.h) and the placeholder lists built
 * for it, one per power-of-two size, built on first use and kept until released.
 */
struct txo__lease_in {
    const char *prefix;
    char *sql[TXO__LEASE_IN_LEVELS];
};

void txo__lease_in_init(struct txo__lease_in *in, const char *prefix);
/* Frees the built statements (not in itself). */
void txo__lease_in_release(struct txo__lease_in *in);

/*
 * Runs in's statement in tx with params[0..fixed) followed by ids[0..n) (n >= 1), the list
 * padded to its power-of-two size by repeating the last id; params has room for cap values
 * (fixed + txo_sql_in_list_size(n) <= cap, or it is a bug). *affected (may be NULL) gets the
 * rows changed. Errors: TXO_ENOMEM, DB errors.
 */
TXO_MUST_CHECK int txo__lease_exec_in(struct txo_tx *tx, struct txo__lease_in *in,
                                      struct txo_param *params, size_t cap, size_t fixed,
                                      const int64_t *ids, size_t n, uint64_t *affected,
                                      struct txo_error *err);

/*
 * One claim pass over one range of a work table (the due PENDING rows, the expired leases,
 * ...), written as the statements of both strategies: constant data, one per range, next to
 * the module's statements. Parameters are bound in this order:
 *   select_locked    where[], limit            SELECT <columns> ... FOR UPDATE SKIP LOCKED
 *   mark_by_id_in    set[], ids...             UPDATE ... SET <claim> WHERE id IN (...)
 *   update_limit     set[], where[], limit     UPDATE ... SET <claim> ... LIMIT ?
 *   select_by_token  where[], token            SELECT <columns> ... locked by the token
 * set[] holds what the claim writes (token, lease, owner), where[] what narrows the range
 * (a cursor); either may be empty. select_by_token may be NULL when the caller reads the
 * claimed rows back itself (after several passes under one token).
 */
struct txo__lease_pass {
    const char *select_locked;
    const char *mark_by_id_in;
    const char *update_limit;
    const char *select_by_token;
    size_t id_col; /* column of the id in the SELECTs */
};

/* What one pass is asked to do. */
struct txo__lease_claim {
    enum txo_claim_strategy strategy; /* resolved: skip-locked or update-limit */
    const char *token;
    const struct txo_param *set;
    size_t n_set;
    const struct txo_param *where;
    size_t n_where;
    size_t limit; /* most rows to claim, >= 1 */
    /*
     * skip-locked only: rows of the SELECT to leave out of the mark (the caller does
     * something else with them, such as failing a poison command). NULL keeps every row.
     */
    bool (*skip)(const struct txo_rows *rows, size_t i, void *arg);
    void *skip_arg;
    /* skip-locked: the IN lists built for the pass's mark_by_id_in, kept by the caller. */
    struct txo__lease_in *mark_in;
    /* Scratch sized by the caller: ids for limit rows, params for cap values. */
    int64_t *ids;
    struct txo_param *params;
    size_t params_cap;
};

/*
 * Runs pass p in tx as c asks. skip-locked: SELECT ... FOR UPDATE SKIP LOCKED (*rows gets the
 * result), then the mark by id of the rows not skipped (when there is one). update-limit: the
 * UPDATE ... LIMIT, then (when it changed a row and p->select_by_token is set) the SELECT by
 * token into *rows. *rows is NULL when no SELECT ran; the caller frees it with
 * txo_rows_free(), also on error. *marked gets the rows the UPDATE changed, so the caller can
 * tell a lost row from a claimed one. Errors: TXO_ENOMEM, DB errors (the caller's
 * transaction then rolls back).
 */
TXO_MUST_CHECK int txo__lease_claim(struct txo_tx *tx, const struct txo__lease_pass *p,
                                    const struct txo__lease_claim *c, struct txo_rows **rows,
                                    uint64_t *marked, struct txo_error *err);

/*
 * When a separate reclaim pass is due: on the first call, then at most once per
 * max(1, lease_s / 4) seconds on the monotonic clock.
 */
struct txo__lease_reclaimer {
    bool done_once;
    int64_t last_ms;
};

/* True when a reclaim pass is due by r (always when r is NULL or never ran). */
bool txo__lease_reclaim_due(const struct txo__lease_reclaimer *r, unsigned lease_s);

/*
 * Runs reclaim_sql (an UPDATE of expired leases back to PENDING, params: limit) on db in a
 * transaction of its own when r says it is due (always when r is NULL); *reclaimed gets the
 * rows it changed (0 when it was not due). Errors: DB errors.
 */
TXO_MUST_CHECK int txo__lease_reclaim(struct txo_db *db, struct txo__lease_reclaimer *r,
                                      unsigned lease_s, const char *reclaim_sql, int64_t limit,
                                      uint64_t *reclaimed, struct txo_error *err);

#endif
