/*
 * Test support: a consumer test's effect, the message in the inbox (see testinbox.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testinbox.h"

struct record {
    const struct txo_inbound_message *msg;
    const char *type;
    bool duplicate;
};

static int record(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct record *r = arg;
    char *data = strndup(r->msg->data, r->msg->len);
    assert_non_null(data);
    int rc = txo_inbox_record(tx, r->msg->msg_id, r->type, data, &r->duplicate, err);
    free(data);
    return rc;
}

int testinbox_record(struct txo_db *db, const struct txo_inbound_message *msg, const char *type,
                     bool *duplicate, struct txo_error *err)
{
    struct record r = {msg, type, false};
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, record, &r, err);
    if (rc == 0)
        *duplicate = r.duplicate;
    return rc;
}
