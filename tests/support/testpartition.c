#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "testpartition.h"
#include "testproc.h"

int testpartition_txo(const char *action, enum txo_partition_table table, const char *extra)
{
    const char *which = table == TXO_PARTITION_INBOX ? "inbox" : "outbox";
    const char *args[] = {"partition", action, which, "--partition-batch=300", extra, NULL};
    char *out = NULL;
    int rc = testproc_run_txo("partition", args, 120000, &out);
    print_message("txo partition %s %s: %d\n%s", action, which, rc, out);
    free(out);
    return rc;
}

bool testpartition_enabled(struct txo_db *db, enum txo_partition_table table)
{
    bool yes = false;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_partition_is_enabled(db, table, &yes, &err) < 0)
        fail_msg("reading the layout of %s: %s", txo_partition_table_name(table), err.msg);
    return yes;
}
