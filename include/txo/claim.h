/*
 * How a worker claims rows of a work table (outbox_events for the relay, command_queue for
 * command workers): the choice is the same for every table, so it has one enum.
 *
 *   skip-locked   SELECT ... FOR UPDATE SKIP LOCKED, then UPDATE by id (MySQL 8.0.1+,
 *                 MariaDB 10.6+): concurrent claims take disjoint rows without waiting.
 *   update-limit  UPDATE ... ORDER BY ... LIMIT n with the claim's token, then SELECT by
 *                 token (older servers): concurrent claims wait for each other.
 *   auto          skip-locked when the server has it (txo_db_has_skip_locked()), else
 *                 update-limit.
 *
 * Thread-safety: pure functions.
 */
#ifndef TXO_CLAIM_H
#define TXO_CLAIM_H

#include "txo/common.h"

enum txo_claim_strategy {
    TXO_CLAIM_AUTO = 0, /* skip-locked when the server supports it, else update-limit */
    TXO_CLAIM_SKIP_LOCKED,
    TXO_CLAIM_UPDATE_LIMIT,
};

/* "auto", "skip-locked", "update-limit". Never NULL; an unknown value is a bug. */
TXO_API const char *txo_claim_strategy_name(enum txo_claim_strategy s);
/* Parses one of the names above. Returns 0, or TXO_EINVAL (*out untouched). */
TXO_API int txo_claim_strategy_parse(const char *name, enum txo_claim_strategy *out);

#endif
