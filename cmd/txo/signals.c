/*
 * The daemons' one shutdown path (signals.h): blocked signals received with sigwaitinfo() in
 * the main thread, so nothing runs in a signal handler and no system call is interrupted.
 * The wake-up is a SIGUSR1 this process sends itself; sigwaitinfo() tells it apart from one
 * sent by another process by the sender's pid.
 */
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <unistd.h>

#include "signals.h"

/* Written once by signals_block(), before any other thread exists. */
static bool blocked;

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

int signals_wait(void)
{
    sigset_t set;
    stop_set(&set);
    int sig = 0;
    for (;;) {
        siginfo_t info;
        int got = sigwaitinfo(&set, &info);
        if (got == SIGINT || got == SIGTERM) {
            sig = got;
            break;
        }
        if (got == SIGUSR1 && info.si_pid == getpid())
            break; /* signals_wake() */
        /* EINTR, or a SIGUSR1 from another process: keep waiting. */
    }
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
