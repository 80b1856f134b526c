/* A pause other threads and signal handlers can end (waiter.h). */
#include "core/common.h"

#include "core/waiter.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "txo/clock.h"

_Static_assert(ATOMIC_BOOL_LOCK_FREE == 2, "kick and stop must be async-signal-safe");

int txo__waiter_init(struct txo__waiter *w)
{
    atomic_init(&w->kicked, false);
    atomic_init(&w->stopped, false);
    w->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    return w->fd >= 0 ? 0 : TXO_EIO;
}

void txo__waiter_destroy(struct txo__waiter *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
}

void txo__cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
}

/* Makes the eventfd readable; when its counter is full it already is, so a failure is fine. */
static void ring(struct txo__waiter *w)
{
    uint64_t one = 1;
    ssize_t n = write(w->fd, &one, sizeof(one));
    (void)n;
}

void txo__waiter_kick(struct txo__waiter *w)
{
    atomic_store(&w->kicked, true);
    ring(w);
}

void txo__waiter_stop(struct txo__waiter *w)
{
    atomic_store(&w->stopped, true);
    ring(w);
}

bool txo__waiter_stopped(struct txo__waiter *w)
{
    return atomic_load(&w->stopped);
}

bool txo__waiter_wait(struct txo__waiter *w, int64_t ms, bool kickable)
{
    int64_t until = txo_monotonic_ms() + (ms > 0 ? ms : 0);
    for (;;) {
        if (atomic_load(&w->stopped))
            return false;
        if (kickable && atomic_exchange(&w->kicked, false))
            return true;
        int64_t left = until - txo_monotonic_ms();
        if (left <= 0)
            return true;
        struct pollfd p = {.fd = w->fd, .events = POLLIN};
        if (poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left) > 0) {
            uint64_t count;
            ssize_t n = read(w->fd, &count, sizeof(count)); /* drain; the flags say why */
            (void)n;
        }
    }
}
