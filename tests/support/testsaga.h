/*
 * What the saga engine's tests share: the `effects` table their step functions write (one row
 * per saga, step and kind, n counting the repeats), reads of a saga's step rows, and the
 * wrappers that make a toy step written for one saga a step part (txo_saga_step_fn).
 */
#ifndef TXO_TESTSAGA_H
#define TXO_TESTSAGA_H

#include <stddef.h>
#include <stdint.h>

#include "txo/saga.h"

/* Creates the effects table in the test's database. */
void testsaga_create_effects(struct txo_db *db);

/*
 * The options of the worker these tests run sagas as: txo_saga_opts_init(), then owner
 * "worker-1", 3 tries of a step, a backoff from 10 ms up to backoff_max_ms without jitter, and
 * time from clock (borrowed: it must outlive the options).
 */
void testsaga_worker_opts(struct txo_saga_opts *o, const struct txo_clock *clock,
                          int64_t backoff_max_ms);

/* Records (or counts once more) the effect `kind` of ctx's step, inside tx. */
int testsaga_effect(struct txo_tx *tx, const struct txo_saga_ctx *ctx, const char *kind,
                    struct txo_error *err);

/* A compensation for one saga that only records the effect "undo" (testsaga_effect). */
int testsaga_undo(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err);

/* How many times saga_id's step wrote the effect `kind` (0 when never, or rolled back). */
int64_t testsaga_effects(struct txo_db *db, const char *saga_id, const char *step,
                         const char *kind);

/* Column col of step `step` (1-based) of saga_id, as text; NULL for NULL. Free with txo_free. */
char *testsaga_step_col(struct txo_db *db, const char *saga_id, int step, const char *col);

/* Fails the test unless the step is in status with remote state remote. */
void testsaga_assert_step(struct txo_db *db, const char *saga_id, int step, const char *status,
                          const char *remote);

/* A toy step's part, written for one saga. */
typedef int (*testsaga_one_fn)(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                               struct txo_error *err);
typedef int (*testsaga_remote_one_fn)(const struct txo_saga_ctx *ctx, struct txo_error *err);

/*
 * The step part of `one`: a saga alone gets one's result; in a batch of several every saga
 * runs alone (TXO_EALONE), since what `one` wrote before failing could not be taken back for
 * one saga of the batch.
 */
int testsaga_each(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                  struct txo_error *errs, testsaga_one_fn one);

/* The remote part of `one`: one call per saga, in order. */
void testsaga_each_remote(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                          struct txo_error *errs, testsaga_remote_one_fn one);

/* Defines `name`, the txo_saga_step_fn (or txo_saga_remote_fn) of the one-saga `one`. */
#define TESTSAGA_STEP(name, one)                                                                   \
    static int name(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,  \
                    struct txo_error *errs, struct txo_error *err)                                 \
    {                                                                                              \
        (void)err;                                                                                 \
        return testsaga_each(tx, ctx, n, rcs, errs, one);                                          \
    }
#define TESTSAGA_REMOTE(name, one)                                                                 \
    static void name(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,                    \
                     struct txo_error *errs)                                                       \
    {                                                                                              \
        testsaga_each_remote(ctx, n, rcs, errs, one);                                              \
    }

/* Defines `name`, a txo_saga_remote_fn that hands a batch of several sagas to `many` (a
 * txo_saga_remote_fn) and a saga alone to the one-saga `one`: for tests that script the two. */
#define TESTSAGA_REMOTE_SPLIT(name, many, one)                                                     \
    static void name(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,                    \
                     struct txo_error *errs)                                                       \
    {                                                                                              \
        if (n > 1)                                                                                 \
            many(ctx, n, rcs, errs);                                                               \
        else                                                                                       \
            testsaga_each_remote(ctx, n, rcs, errs, one);                                          \
    }

#endif
