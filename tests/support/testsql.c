#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testdb.h"
#include "testsql.h"

struct txo_exec_result testsql_exec(struct txo_db *db, const char *sql,
                                    const struct txo_param *params, size_t n)
{
    struct txo_exec_result res = {0, 0};
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_exec(db, sql, params, n, &res, &err) != 0)
        fail_msg("%s: %s", sql, err.msg);
    return res;
}

int64_t testsql_i64_of(struct txo_db *db, const char *sql, int64_t id)
{
    struct txo_param p = txo_p_i64(id);
    return testdb_i64(db, sql, &p, 1);
}
