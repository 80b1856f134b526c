/*
 * The command queue: work accepted now and run later by a worker, such as the
 * StartOrderSaga command behind a "202 Accepted" answer. A command is a row of command_queue
 * that commits with the request's own rows (txo_cmdq_enqueue() takes the caller's
 * transaction); workers claim due commands with a lease, run them and record the outcome.
 *
 * Row states (column command_queue.status), and the only moves between them:
 *
 *   PENDING     waiting to run once next_attempt_at has passed
 *               -> PROCESSING (claimed: attempts+1, a fresh lock_token, lease in locked_until)
 *   PROCESSING  claimed by the worker named in locked_by, holding lock_token, until
 *               locked_until
 *               -> DONE       (txo_cmdq_complete_tx: the effect committed with this move)
 *               -> PENDING    (txo_cmdq_fail, transient: next_attempt_at = now + backoff)
 *               -> FAILED     (txo_cmdq_fail, permanent or attempts >= max_attempts; or the
 *                              lease expired with attempts >= the claim's max_attempts)
 *               -> PROCESSING (the lease expired: claimed again by a worker, new token)
 *   DONE        terminal (the retention cleaner deletes it after a while)
 *   FAILED      terminal; last_error says why. An operator may requeue it by hand.
 *
 * Fencing: txo_cmdq_complete_tx() and txo_cmdq_fail() change the row only while it still holds
 * the token of the claim that returned the command. A worker that stalled past its lease, and
 * whose command another worker claimed again, gets TXO_ELEASELOST and changes nothing; since
 * txo_cmdq_complete_tx() runs in the transaction of the command's effect, that effect rolls
 * back with it. A lease that expired but was not yet claimed again still completes (nobody else
 * ran the command). Delivery is therefore at least once: a command whose worker died is run
 * again after its lease, so command handlers must be idempotent (the order saga's
 * correlation id makes StartOrderSaga so).
 *
 * Thread-safety: no shared state; each call uses only the tx/db it is given (one connection
 * per thread). Any number of workers, in threads or processes, may claim concurrently: a
 * command is claimed by one of them at a time.
 */
#ifndef TXO_CMDQ_H
#define TXO_CMDQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/backoff.h"
#include "txo/claim.h"
#include "txo/common.h"
#include "txo/db.h"
#include "txo/trace.h"

enum txo_cmdq_status {
    TXO_CMDQ_PENDING = 0,
    TXO_CMDQ_PROCESSING,
    TXO_CMDQ_DONE,
    TXO_CMDQ_FAILED,
};

/* "PENDING", ... (the column values); "INVALID" for a value outside the enum. Never NULL. */
TXO_API const char *txo_cmdq_status_name(enum txo_cmdq_status s);
/* Parses a column value. Returns 0 or TXO_EINVAL. */
TXO_API int txo_cmdq_status_parse(const char *name, enum txo_cmdq_status *out);
/* True when the state machine above allows from -> to. */
TXO_API bool txo_cmdq_can_move(enum txo_cmdq_status from, enum txo_cmdq_status to);

/* Longest command type in bytes (command_queue.command_type VARCHAR(128)). */
#define TXO_CMDQ_TYPE_MAX 128
/* Longest worker name in bytes (command_queue.locked_by VARCHAR(128)). */
#define TXO_CMDQ_OWNER_MAX 128
/* Most commands one claim may return. */
#define TXO_CMDQ_CLAIM_MAX 10000
/* A lock token: a UUID in text form. */
#define TXO_CMDQ_TOKEN_LEN 36

/*
 * Appends a command inside tx (it commits with the caller's transaction), due at once, with
 * the trace context it was asked for in (txo/trace.h; NULL: none), which its handler
 * continues. *id (may be NULL) receives its id.
 * Errors: TXO_EINVAL (command_type empty or longer than TXO_CMDQ_TYPE_MAX, payload missing),
 * TXO_ECONSTRAINT (payload is not JSON), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_cmdq_enqueue(struct txo_tx *tx, const char *command_type,
                                            const char *payload_json,
                                            const struct txo_trace_ctx *trace, int64_t *id,
                                            struct txo_error *err);

/*
 * A claimed command. The strings are owned by the struct: free them with
 * txo_command_release() (one) or txo_commands_free() (an array from a claim).
 */
struct txo_command {
    int64_t id;
    char *type;                         /* command_type */
    char *payload;                      /* JSON text */
    unsigned attempts;                  /* 1 on the first claim, counting this one */
    char token[TXO_CMDQ_TOKEN_LEN + 1]; /* the claim's lock token (fences complete/fail) */
    bool has_trace;                     /* enqueued in a trace context: trace is it */
    struct txo_trace_ctx trace;
};

/* Frees the strings of cmd (not cmd itself) and clears it. NULL is a no-op. */
TXO_API void txo_command_release(struct txo_command *cmd);
/* Releases cmds[0..n) and frees the array. NULL is a no-op. */
TXO_API void txo_commands_free(struct txo_command *cmds, size_t n);

struct txo_cmdq_claim_opts {
    const char *owner;             /* worker name for locked_by, 1..TXO_CMDQ_OWNER_MAX bytes */
    unsigned lease_s;              /* lease, >= 1; default 30 */
    size_t max;                    /* most commands to claim, 1..TXO_CMDQ_CLAIM_MAX; default 10 */
    unsigned max_attempts;         /* a command whose lease expired after this many attempts
                                    * (its worker died or hung every time: a poison command)
                                    * becomes FAILED instead of being claimed again; 0 = no
                                    * limit (the default) */
    enum txo_claim_strategy claim; /* txo/claim.h, as the relay's; default AUTO */
};

/* Fills opts with the defaults above (owner NULL: the caller must set it). */
TXO_API void txo_cmdq_claim_opts_init(struct txo_cmdq_claim_opts *opts);

/*
 * Claims up to opts->max commands in one short READ COMMITTED transaction of its own: first
 * PROCESSING commands whose lease expired (their worker died or hung), then PENDING commands
 * that are due (next_attempt_at <= now), oldest due first. Each becomes PROCESSING with
 * locked_by = owner, locked_until = now + lease_s, attempts + 1 and the claim's fresh lock
 * token. Strategies (opts->claim):
 *   skip-locked   SELECT ... FOR UPDATE SKIP LOCKED, then UPDATE by id (MySQL 8.0.1+,
 *                 MariaDB 10.6+): concurrent workers take disjoint commands without waiting;
 *   update-limit  UPDATE ... ORDER BY ... LIMIT with the token, then SELECT by token (older
 *                 servers): concurrent claims wait for each other;
 *   auto          skip-locked when txo_db_has_skip_locked(db), else update-limit.
 * On success *cmds is an array of *n commands (NULL when *n is 0), freed by the caller with
 * txo_commands_free(). Errors: TXO_EINVAL (opts), TXO_EUNSUPPORTED (skip-locked requested on a
 * server without it), TXO_ENOMEM, DB errors; nothing is claimed then.
 */
TXO_API TXO_MUST_CHECK int txo_cmdq_claim_ex(struct txo_db *db,
                                             const struct txo_cmdq_claim_opts *opts,
                                             struct txo_command **cmds, size_t *n,
                                             struct txo_error *err);

/* txo_cmdq_claim_ex() with the default options and the given owner, lease and max. */
TXO_API TXO_MUST_CHECK int txo_cmdq_claim(struct txo_db *db, const char *owner, unsigned lease_s,
                                          size_t max, struct txo_command **cmds, size_t *n,
                                          struct txo_error *err);

/*
 * Marks cmd DONE inside tx, the transaction that also applies the command's effect, so both
 * commit or neither does. Fenced by cmd->id and cmd->token.
 * Errors: TXO_ELEASELOST (the command no longer holds this claim's token: its lease expired and
 * another worker claimed it, or it went back to PENDING; roll tx back), TXO_ESTATE (it is
 * already DONE or FAILED under this token), TXO_ENOTFOUND (no such command), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_cmdq_complete_tx(struct txo_tx *tx, const struct txo_command *cmd,
                                                struct txo_error *err);

/* txo_cmdq_complete_tx() in a READ COMMITTED transaction of its own on db. Same errors. */
TXO_API TXO_MUST_CHECK int txo_cmdq_complete(struct txo_db *db, const struct txo_command *cmd,
                                             struct txo_error *err);

/*
 * Records that running cmd failed with the message `error` (may be NULL; cut to 2000 bytes),
 * in a transaction of its own, fenced like txo_cmdq_complete_tx():
 *   permanent, or cmd->attempts >= max_attempts:  FAILED, last_error = error;
 *   otherwise:  PENDING, last_error = error, lease and token cleared,
 *               next_attempt_at = now + txo_backoff_delay_ms(backoff, cmd->attempts, rand)
 *               (the first failure waits about base_ms, the next twice that, ...).
 * backoff NULL means base 1 s, max 5 min, jitter 0.5. *failed (may be NULL) tells whether the
 * command became FAILED.
 * Errors: TXO_EINVAL (max_attempts 0, bad backoff), TXO_ELEASELOST, TXO_ESTATE, TXO_ENOTFOUND
 * (as for txo_cmdq_complete_tx()), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_cmdq_fail(struct txo_db *db, const struct txo_command *cmd,
                                         const char *error, bool permanent, unsigned max_attempts,
                                         const struct txo_backoff *backoff, bool *failed,
                                         struct txo_error *err);

/*
 * Counts commands by state (each out-pointer may be NULL). PROCESSING includes expired leases
 * not yet claimed again. Errors: DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_cmdq_stats(struct txo_db *db, uint64_t *pending,
                                          uint64_t *processing, uint64_t *failed,
                                          struct txo_error *err);

/*
 * Retention: deletes DONE commands finished more than older_than_s seconds ago, oldest first,
 * at most batch_size (1..10000) rows per short transaction of its own, until none is left or
 * max_batches batches ran (0 = no limit). FAILED commands are kept for operators. *deleted (may
 * be NULL) receives the number deleted, also when a later batch failed.
 * Errors: TXO_EINVAL (batch_size), DB errors. Implemented in src/retention/retention.c.
 */
TXO_API TXO_MUST_CHECK int txo_cmdq_purge_done(struct txo_db *db, unsigned older_than_s,
                                               unsigned batch_size, unsigned max_batches,
                                               uint64_t *deleted, struct txo_error *err);

#endif
