/*
 * Test support: the messages a consumer's handler was given (see testconsume.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testconsume.h"

struct testconsume_msg *testconsume_add(struct testconsume_list *l,
                                        const struct txo_inbound_message *msg)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->got = realloc(l->got, l->cap * sizeof(*l->got));
        assert_non_null(l->got);
    }
    struct testconsume_msg *m = &l->got[l->n++];
    snprintf(m->msg_id, sizeof(m->msg_id), "%s", msg->msg_id ? msg->msg_id : "(null)");
    snprintf(m->subject, sizeof(m->subject), "%s", msg->subject ? msg->subject : "(null)");
    m->delivery = msg->delivery;
    m->data = malloc(msg->len + 1);
    assert_non_null(m->data);
    memcpy(m->data, msg->data, msg->len);
    m->data[msg->len] = '\0';
    return m;
}

size_t testconsume_count_id(const struct testconsume_list *l, const char *msg_id)
{
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++)
        k += strcmp(l->got[i].msg_id, msg_id) == 0;
    return k;
}

void testconsume_release(struct testconsume_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->got[i].data);
    free(l->got);
    memset(l, 0, sizeof(*l));
}
