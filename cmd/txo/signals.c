/*
 * The daemons' one shutdown path (signals.h): blocked signals received with sigwaitinfo() in
 * the main thread, so nothing runs in a signal handler and no system call is interrupted.
 * The wake-up is a SIGUSR1 this process sends itself; sigwaitinfo() tells it apart from one
 * sent by another process by the sender's pid.
 *
 * The waits can call a tick between signals (signals_set_tick(): the systemd watchdog ping of
 * notify.c), so a stuck main thread stops the pings. The tick is a hook rather than a call so
 * that this file, shared with txo-fake-services, needs no libsystemd.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "signals.h"

/* Written once by signals_block(), before any other thread exists. */
static bool blocked;

/* Written by signals_set_tick() before the waits; read only by the thread that waits. */
static void (*tick_fn)(void);
static int64_t tick_ms;

static void stop_set(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGUSR1);
}

void signals_block(void)
{
    sigset_t set;
    stop_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    blocked = true;
}

void signals_set_tick(void (*fn)(void), int64_t interval_ms)
{
    tick_fn = interval_ms > 0 ? fn : NULL;
    tick_ms = interval_ms;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Waits for a stop signal or the wake-up for at most timeout_ms (< 0: no limit), calling the
 * tick every tick_ms meanwhile. Returns SIGINT or SIGTERM, 0 for signals_wake(), -1 on timeout.
 */
static int wait_stop(int64_t timeout_ms)
{
    sigset_t set;
    stop_set(&set);
    int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : INT64_MAX;
    for (;;) {
        int64_t left = deadline == INT64_MAX ? INT64_MAX : deadline - now_ms();
        if (left <= 0)
            return -1;
        int64_t step = tick_fn != NULL && tick_ms < left ? tick_ms : left;
        siginfo_t info;
        int got;
        if (step == INT64_MAX) {
            got = sigwaitinfo(&set, &info);
        } else {
            struct timespec ts = {.tv_sec = (time_t)(step / 1000),
                                  .tv_nsec = (long)(step % 1000) * 1000000};
            got = sigtimedwait(&set, &info, &ts);
        }
        if (got == SIGINT || got == SIGTERM)
            return got;
        if (got == SIGUSR1 && info.si_pid == getpid())
            return 0; /* signals_wake() */
        if (got < 0 && errno == EAGAIN && tick_fn != NULL)
            tick_fn();
        /* EINTR, or a SIGUSR1 from another process: keep waiting. */
    }
}

int signals_sleep(int64_t ms)
{
    int got = wait_stop(ms);
    return got > 0 ? got : 0;
}

int signals_wait(void)
{
    int sig = wait_stop(-1);
    /* A second signal during the graceful stop ends the process at once. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
    return sig;
}

void signals_wake(void)
{
    /* Unblocked, SIGUSR1 would terminate the process: then there is no wait to end either. */
    if (blocked)
        kill(getpid(), SIGUSR1);
}
