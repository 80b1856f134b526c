#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "testrelaythread.h"

static void *relay_main(void *arg)
{
    struct testrelay_thread *t = arg;
    struct txo_error err;
    txo_error_init(&err);
    t->rc = txo_relay_run(t->relay, &err);
    snprintf(t->msg, sizeof(t->msg), "%s", err.msg);
    return NULL;
}

void testrelay_thread_start(struct testrelay_thread *t, struct txo_relay *relay)
{
    t->relay = relay;
    t->rc = 0;
    t->msg[0] = '\0';
    assert_int_equal(pthread_create(&t->th, NULL, relay_main, t), 0);
}

void testrelay_thread_join(struct testrelay_thread *t)
{
    pthread_join(t->th, NULL);
    if (t->rc != 0)
        fail_msg("txo_relay_run: %s", t->msg);
}
