/*
 * Test support: a relay running txo_relay_run() on a thread of its own, for the tests that run
 * relays side by side and stop them from the test's thread (txo_relay_stop).
 */
#ifndef TXO_TESTRELAYTHREAD_H
#define TXO_TESTRELAYTHREAD_H

#include <pthread.h>

#include "txo/relay.h"

struct testrelay_thread {
    struct txo_relay *relay; /* borrowed: the caller frees it after the join */
    pthread_t th;
    int rc;                      /* what txo_relay_run() returned */
    char msg[TXO_ERROR_MSG_MAX]; /* and its error message */
};

/* Runs relay on a new thread until txo_relay_run() returns; the test fails when it cannot. */
void testrelay_thread_start(struct testrelay_thread *t, struct txo_relay *relay);

/* Waits for that thread; the test fails with the error when txo_relay_run() failed. */
void testrelay_thread_join(struct testrelay_thread *t);

#endif
