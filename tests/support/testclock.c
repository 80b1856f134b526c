#include "testclock.h"

static int64_t now_ms(void *arg)
{
    return ((struct testclock *)arg)->now_ms;
}

static void sleep_ms(void *arg, int64_t ms)
{
    struct testclock *c = arg;
    c->now_ms += ms;
    c->sleeps++;
}

void testclock_init(struct testclock *c)
{
    c->now_ms = 0;
    c->sleeps = 0;
    c->clock.now_ms = now_ms;
    c->clock.sleep_ms = sleep_ms;
    c->clock.arg = c;
}
