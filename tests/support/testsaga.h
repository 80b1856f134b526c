/*
 * What the saga engine's tests share: the `effects` table their step functions write (one row
 * per saga, step and kind, n counting the repeats), and reads of a saga's step rows.
 */
#ifndef TXO_TESTSAGA_H
#define TXO_TESTSAGA_H

#include <stdint.h>

#include "txo/saga.h"

/* Creates the effects table in the test's database. */
void testsaga_create_effects(struct txo_db *db);

/* Records (or counts once more) the effect `kind` of ctx's step, inside tx. */
int testsaga_effect(struct txo_tx *tx, const struct txo_saga_ctx *ctx, const char *kind,
                    struct txo_error *err);

/* How many times saga_id's step wrote the effect `kind` (0 when never, or rolled back). */
int64_t testsaga_effects(struct txo_db *db, const char *saga_id, const char *step,
                         const char *kind);

/* Column col of step `step` (1-based) of saga_id, as text; NULL for NULL. Free with txo_free. */
char *testsaga_step_col(struct txo_db *db, const char *saga_id, int step, const char *col);

/* Fails the test unless the step is in status with remote state remote. */
void testsaga_assert_step(struct txo_db *db, const char *saga_id, int step, const char *status,
                          const char *remote);

#endif
