/*
 * Every statement that changes outbox_events.status, with the moves it makes: the state
 * machine of include/txo/outbox.h (txo_outbox_can_move(), src/outbox/outbox.c) as the SQL
 * runs it. The statements live with the modules that run them (relay_sql.h, dlq_sql.h); this
 * list names them in one place so that tests/unit/test_sql_moves.c can check each one's SQL
 * text (the status it sets and the status its WHERE picks) against the list and the list
 * against txo_outbox_can_move(). A new statement that changes the status belongs here.
 *
 * X(STMT, PICKED_BY, FROM, TO): STMT moves rows from FROM to TO. PICKED_BY is the statement
 * whose WHERE selects the rows: STMT itself, or, for an UPDATE by id list, the locking SELECT
 * that returned those ids in the same transaction (a lease pass of src/queue/lease.c). A
 * statement that can make several moves has one entry per move. FROM and TO are
 * enum txo_outbox_status names without the TXO_OUTBOX_ prefix.
 */
#ifndef TXO_OUTBOX_MOVES_H
#define TXO_OUTBOX_MOVES_H

#include "dlq/dlq_sql.h"
#include "relay/binlog_sql.h"
#include "relay/relay_sql.h"
#include "relay/shard_sql.h"

#define OUTBOX_MOVES(X)                                                                            \
    /* Claim, skip-locked: rows the SELECT ... SKIP LOCKED locked, then marked by id. */           \
    X(RELAY_SQL_CLAIM_BY_ID_IN, RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED, PENDING, PROCESSING)           \
    X(RELAY_SQL_CLAIM_BY_ID_IN, RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED_AFTER, PENDING, PROCESSING)     \
    /* Claim, skip-locked, ordered by aggregate: rows of a snapshot read, marked by id if they     \
     * are still PENDING. */                                                                       \
    X(RELAY_SQL_ORDERED_CLAIM_BY_ID_IN, RELAY_SQL_ORDERED_CLAIM_BY_ID_IN, PENDING, PROCESSING)     \
    /* Claim, update-limit. */                                                                     \
    X(RELAY_SQL_CLAIM_UPDATE_LIMIT, RELAY_SQL_CLAIM_UPDATE_LIMIT, PENDING, PROCESSING)             \
    X(RELAY_SQL_CLAIM_UPDATE_LIMIT_AFTER, RELAY_SQL_CLAIM_UPDATE_LIMIT_AFTER, PENDING, PROCESSING) \
    X(RELAY_SQL_CLAIM_UPDATE_LIMIT_ORDERED, RELAY_SQL_CLAIM_UPDATE_LIMIT_ORDERED, PENDING,         \
      PROCESSING)                                                                                  \
    X(RELAY_SQL_CLAIM_UPDATE_LIMIT_ORDERED_AFTER, RELAY_SQL_CLAIM_UPDATE_LIMIT_ORDERED_AFTER,      \
      PENDING, PROCESSING)                                                                         \
    /* Mark, fenced by the claim's token. */                                                       \
    X(RELAY_SQL_MARK_PUBLISHED_IN, RELAY_SQL_MARK_PUBLISHED_IN, PROCESSING, PUBLISHED)             \
    X(RELAY_SQL_MARK_FAILED_IN, RELAY_SQL_MARK_FAILED_IN, PROCESSING, PENDING)                     \
    X(RELAY_SQL_MARK_FAILED_IN, RELAY_SQL_MARK_FAILED_IN, PROCESSING, FAILED)                      \
    /* Mark of rows held PENDING by their transaction (claim mode TRANSACTION) or published        \
     * from the binary log. */                                                                     \
    X(RELAY_SQL_HELD_PUBLISHED_IN, RELAY_SQL_HELD_PUBLISHED_IN, PENDING, PUBLISHED)                \
    X(RELAY_SQL_HELD_FAILED_IN, RELAY_SQL_HELD_FAILED_IN, PENDING, PENDING)                        \
    X(RELAY_SQL_HELD_FAILED_IN, RELAY_SQL_HELD_FAILED_IN, PENDING, FAILED)                         \
    /* A binlog source's hand-back: the rows it published, left PENDING, settled. */               \
    X(BINLOG_SQL_SETTLE, BINLOG_SQL_SETTLE, PENDING, PUBLISHED)                                    \
    /* Claimed, held back unpublished behind an earlier event of the aggregate: unchanged. */      \
    X(RELAY_SQL_RELEASE_IN, RELAY_SQL_RELEASE_IN, PROCESSING, PENDING)                             \
    /* Expired leases back to PENDING. */                                                          \
    X(RELAY_SQL_RECLAIM_EXPIRED, RELAY_SQL_RECLAIM_EXPIRED, PROCESSING, PENDING)                   \
    /* In flight in a shard another relay took over: back to PENDING. */                           \
    X(RELAY_SHARD_SQL_RECLAIM_IN, RELAY_SHARD_SQL_RECLAIM_IN, PROCESSING, PENDING)                 \
    /* Expired leases at the lease-expiry limit: poison events, dead-lettered. */                  \
    X(RELAY_SQL_RECLAIM_POISON_IN, RELAY_SQL_RECLAIM_SELECT_POISON, PROCESSING, FAILED)            \
    /* An operator's replay of a dead letter. */                                                   \
    X(DLQ_SQL_REQUEUE_SOURCE, DLQ_SQL_REQUEUE_SOURCE, FAILED, PENDING)                             \
    /* An operator's skip of a dead letter: its aggregate goes on without it. */                   \
    X(DLQ_SQL_SKIP_SOURCE, DLQ_SQL_SKIP_SOURCE, FAILED, SKIPPED)

#endif
