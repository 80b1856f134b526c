/*
 * Test support: a statement with bound parameters run from a test (testdb_exec() and
 * testdb_q() take no values), failing the current cmocka test on an error, so the rows a test
 * writes or reads straight never have values formatted into their SQL.
 */
#ifndef TXO_TESTSQL_H
#define TXO_TESTSQL_H

#include <stddef.h>

#include "txo/txo.h"

/*
 * Runs sql with its n bound params in a transaction of its own (txo_db_exec); returns the
 * rows it changed and the insert id. The test fails with the error when it fails.
 */
struct txo_exec_result testsql_exec(struct txo_db *db, const char *sql,
                                    const struct txo_param *params, size_t n);

/* testdb_i64() of a query that takes one integer: an id the test asks about. */
int64_t testsql_i64_of(struct txo_db *db, const char *sql, int64_t id);

#endif
