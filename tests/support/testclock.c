#include "testclock.h"

#include <string.h>

static int64_t now_ms(void *arg)
{
    return ((struct testclock *)arg)->now_ms;
}

static void sleep_ms(void *arg, int64_t ms)
{
    struct testclock *c = arg;
    if (c->sleeps < TESTCLOCK_SLEEPS_KEPT)
        c->slept_ms[c->sleeps] = ms;
    c->sleeps++;
    if (!c->frozen)
        c->now_ms += ms;
    if (c->on_sleep != NULL)
        c->on_sleep(c);
}

void testclock_init(struct testclock *c)
{
    memset(c, 0, sizeof(*c));
    c->clock.now_ms = now_ms;
    c->clock.sleep_ms = sleep_ms;
    c->clock.arg = c;
}
