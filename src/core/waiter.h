/*
 * A thread's pause that other threads, and signal handlers, can end (src/core/waiter.c): the
 * idle sleep and the backoff of a relay, the pause between two heartbeats. The waiting thread
 * polls an eventfd, so a kick or a stop ends the pause at once instead of at the next poll
 * slice, and poll's timeout runs on the monotonic clock: a change of the wall clock neither
 * shortens nor stretches a pause.
 *
 *   kick   ends the current pause of a kickable wait, or the next one if none runs (a kick is
 *          kept until a kickable wait takes it: "something was committed while you worked");
 *          a wait that is not kickable goes on waiting;
 *   stop   ends every wait, now and from then on.
 *
 * Thread-safety: any thread may kick or stop, and both are async-signal-safe (a lock-free
 * atomic and a write(2)); one thread waits.
 */
#ifndef TXO_CORE_WAITER_H
#define TXO_CORE_WAITER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct txo__waiter {
    int fd; /* eventfd: written by kick and stop, drained by the waiter */
    atomic_bool kicked;
    atomic_bool stopped;
};

/* Returns 0, or TXO_EIO when no eventfd can be made (errno says why). */
int txo__waiter_init(struct txo__waiter *w);
void txo__waiter_destroy(struct txo__waiter *w);

void txo__waiter_kick(struct txo__waiter *w);
void txo__waiter_stop(struct txo__waiter *w);
bool txo__waiter_stopped(struct txo__waiter *w);

/*
 * Waits up to ms (<= 0: not at all), or until stopped; with kickable, also until kicked (and
 * takes the kick). Returns false once stopped.
 */
bool txo__waiter_wait(struct txo__waiter *w, int64_t ms, bool kickable);

/*
 * Initializes cv on CLOCK_MONOTONIC, the clock of txo_monotonic_deadline(): the condition
 * variable of every timed wait in the library, so that a change of the wall clock neither
 * shortens nor stretches it. Destroy it with pthread_cond_destroy().
 */
void txo__cond_init_monotonic(pthread_cond_t *cv);

#endif
