/*
 * A fake clock for tests (txo/clock.h): time moves only when the code under test sleeps, so
 * backoff and retry paths run at once and the sleeps can be counted.
 */
#ifndef TXO_TESTCLOCK_H
#define TXO_TESTCLOCK_H

#include <stdint.h>

#include "txo/clock.h"

struct testclock {
    int64_t now_ms;         /* starts at 0 */
    unsigned sleeps;        /* sleep_ms calls so far */
    struct txo_clock clock; /* hand &clock to the code under test */
};

/* Sets c to time 0 with no sleeps, its clock pointing at c. */
void testclock_init(struct testclock *c);

#endif
