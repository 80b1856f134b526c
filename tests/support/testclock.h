/*
 * A fake clock for tests (txo/clock.h): time moves only when the code under test sleeps (or
 * the test moves now_ms), so backoff, retry and rate-limit paths run at once and their sleeps
 * can be counted and read back.
 */
#ifndef TXO_TESTCLOCK_H
#define TXO_TESTCLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "txo/clock.h"

#define TESTCLOCK_SLEEPS_KEPT 16

struct testclock {
    int64_t now_ms;                          /* starts at 0; the test may set or move it */
    unsigned sleeps;                         /* sleep_ms calls so far */
    int64_t slept_ms[TESTCLOCK_SLEEPS_KEPT]; /* the length of the first ones */
    bool frozen;                             /* true: a sleep is recorded, time stays */
    void (*on_sleep)(struct testclock *c);   /* optional, after each sleep */
    void *user;                              /* for on_sleep */
    struct txo_clock clock;                  /* hand &clock to the code under test */
};

/* Sets c to time 0 with no sleeps, not frozen, no hook, its clock pointing at c. */
void testclock_init(struct testclock *c);

#endif
