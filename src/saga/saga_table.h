/*
 * A service's table of saga definitions, one per saga type, as the worker (txo/worker.h) and
 * the admin API (txo/admin.h) are given it: the checks a table must pass and the lookup by the
 * type a saga_instances row names. Private to the library.
 *
 * Thread-safety: pure functions of the table, which is read-only.
 */
#ifndef TXO_SAGA_TABLE_H
#define TXO_SAGA_TABLE_H

#include "txo/saga.h"

/* 0 when every entry of sagas[0..n) has a type and no type comes twice; TXO_EINVAL naming the
 * entry otherwise (also when n > 0 and sagas is NULL). */
int txo__saga_table_check(const struct txo_saga_def *const *sagas, size_t n, struct txo_error *err);

/* The definition of type in sagas[0..n), or NULL. */
const struct txo_saga_def *txo__saga_table_find(const struct txo_saga_def *const *sagas, size_t n,
                                                const char *type);

#endif
