/*
 * Time (include/txo/clock.h): monotonic time for durations and timeouts, wall-clock time for
 * timestamps, a sleep that is not cut short by signals, and RFC 3339 formatting.
 *
 * Durations are always measured on CLOCK_MONOTONIC, which does not jump when NTP or an
 * operator sets the wall clock; CLOCK_REALTIME is only for timestamps that humans or other
 * hosts read. Code that waits takes a struct txo_clock so tests can inject a fake one;
 * txo_clock_system() is the real one.
 *
 * Thread-safety: no state at all; the system clock struct is a constant.
 */
#include "core/common.h"

#include <time.h>

static int64_t clock_us(clockid_t id)
{
    struct timespec ts;

    /* The clocks used here exist on every POSIX system we build for: failure is a bug. */
    if (clock_gettime(id, &ts) != 0) {
        TXO_BUG("clock_gettime(%d) failed: errno=%d", (int)id, errno);
    }
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void txo_monotonic_deadline(int64_t ms, struct timespec *out)
{
    if (ms < 0)
        ms = 0;
    if (clock_gettime(CLOCK_MONOTONIC, out) != 0) {
        TXO_BUG("clock_gettime(CLOCK_MONOTONIC) failed: errno=%d", errno);
    }
    out->tv_sec += (time_t)(ms / 1000);
    out->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (out->tv_nsec >= 1000000000L) {
        out->tv_sec++;
        out->tv_nsec -= 1000000000L;
    }
}

int64_t txo_monotonic_us(void)
{
    return clock_us(CLOCK_MONOTONIC);
}

int64_t txo_monotonic_ms(void)
{
    return clock_us(CLOCK_MONOTONIC) / 1000;
}

int64_t txo_realtime_us(void)
{
    return clock_us(CLOCK_REALTIME);
}

void txo_sleep_ms(int64_t ms)
{
    if (ms <= 0) {
        return;
    }
    struct timespec req = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    struct timespec rem;

    /* A signal handler (SIGTERM for a graceful stop) interrupts nanosleep; sleep the rest. */
    while (nanosleep(&req, &rem) != 0 && errno == EINTR) {
        req = rem;
    }
}

static int64_t system_now_ms(void *arg)
{
    (void)arg;
    return txo_monotonic_ms();
}

static void system_sleep_ms(void *arg, int64_t ms)
{
    (void)arg;
    txo_sleep_ms(ms);
}

static const struct txo_clock system_clock = {
    .now_ms = system_now_ms,
    .sleep_ms = system_sleep_ms,
    .arg = NULL,
};

const struct txo_clock *txo_clock_system(void)
{
    return &system_clock;
}

void txo_format_rfc3339(int64_t realtime_us, char out[TXO_RFC3339_LEN])
{
    /* Floor division, so instants before 1970 get a positive fraction of a second. */
    int64_t secs = realtime_us / 1000000;
    int64_t frac_us = realtime_us % 1000000;
    if (frac_us < 0) {
        frac_us += 1000000;
        secs -= 1;
    }

    time_t t = (time_t)secs;
    struct tm tm;
    int n = -1;
    /* RFC 3339 has four-digit years; anything else gets a fixed, still parseable string. */
    if (gmtime_r(&t, &tm) != NULL && tm.tm_year >= -1900 && tm.tm_year <= 9999 - 1900) {
        n = snprintf(out, TXO_RFC3339_LEN, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)frac_us);
    }
    if (n < 0 || n >= TXO_RFC3339_LEN) {
        snprintf(out, TXO_RFC3339_LEN, "0000-01-01T00:00:00.000000Z");
    }
}
