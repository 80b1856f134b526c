/*
 * The connection slots of the HTTP server (src/http/server_slots.c) against a real `txo serve`,
 * on raw sockets (testraw.h) bound to many loopback addresses: 127.0.0.0/8 is all local on
 * Linux, so one test is many clients, each with its own per-client connection count.
 *
 *   idle        600 idle keep-alive connections from 127.0.0.2-.9 take every slot (8 addresses
 *               x 64 per address = 512); a new client on 127.0.0.1 and one on 127.0.0.10 are
 *               each served within 1 s, because the oldest idle connection is closed to admit
 *               each of them, and the newest idle connection still works.
 *   slow heads  512 connections from the same addresses, every other one trickling a request
 *               head and the rest silent: a normal client is still served within 1 s, because
 *               a silent connection yields its slot like an idle one and at most a quarter of
 *               the slots may be reading a request (the oldest is refused with 408).
 *   memory      three waves of 5,000 connections, each sending a 4 KB head (a request with
 *               cookies), served and closed: after each wave the server's resident memory is
 *               back within KEPT_KB of where it was before the waves (a warm-up wave has run
 *               every handler thread, so their malloc arenas exist already), and after the
 *               third it is within twice that (skipped under ASan and TSan, whose allocators
 *               keep freed memory on purpose). KEPT_KB is what malloc_trim cannot give back,
 *               the pages still partly in use; the memory of 5,000 connections is about 30 MB.
 *
 * RLIMIT_NOFILE is raised to its hard limit before the server starts: the test holds up to
 * 5,000 sockets and the server, which inherits the limit, as many.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "testrun.h"
#include "testdb.h"
#include "testhttp.h"
#include "testproc.h"
#include "testraw.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define HEALTHZ "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"

enum {
    SLOTS = 512,      /* --max-connections default */
    WAVE = 5000,      /* connections of one memory wave */
    SERVED_MS = 1000, /* a new client is answered within this */
    KEPT_KB = 2048,   /* resident memory a wave may leave behind */
};

static int setup(void **state)
{
    struct testhttp_daemon *c = testdb_fixture_new(sizeof(*c), "slots", TESTDB_NEW_EXPORT_ENV);
    *state = c;
    return 0;
}

static void start(struct testhttp_daemon *c, const char *const *args)
{
    c->port = testhttp_txo_start(&c->srv, "slots", "serve", args);
}

static void stop(struct testhttp_daemon *c)
{
    testhttp_txo_stop(&c->srv, "txo serve");
}

/* The i-th of the addresses 127.0.0.2-.9 that fill the server. */
static const char *filler_address(int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "127.0.0.%d", 2 + i % 8);
    return buf;
}

/*
 * A new connection from `from` is answered 200 to GET /healthz within SERVED_MS. Returns it,
 * kept alive (close() it), so that it goes on holding its slot.
 */
static int expect_served(struct testhttp_daemon *c, const char *from, const char *what)
{
    int64_t t0 = txo_monotonic_ms();
    int fd = testraw_dial_from(c->port, from);
    struct testraw_reply r;
    bool answered = testraw_send_str(fd, HEALTHZ) && testraw_read_reply(fd, &r);
    int64_t ms = txo_monotonic_ms() - t0;
    if (!answered)
        fail_msg("%s: a new client on %s got no answer after %lld ms", what, from, (long long)ms);
    if (r.status != 200)
        fail_msg("%s: a new client on %s got %d after %lld ms: %s", what, from, r.status,
                 (long long)ms, r.body);
    if (ms > SERVED_MS)
        fail_msg("%s: a new client on %s was served after %lld ms, want at most %d", what, from,
                 (long long)ms, SERVED_MS);
    print_message("%s: a new client on %s served in %lld ms\n", what, from, (long long)ms);
    return fd;
}

/* True when fd has neither bytes nor an EOF to read now. */
static bool still_open(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

/* ---- idle keep-alive connections ---- */

static void test_idle_connections_yield_to_new_clients(void **state)
{
    struct testhttp_daemon *c = *state;
    start(c, NULL); /* the defaults: 512 slots, 64 per client address, 30 s idle timeout */

    enum { HELD = 600 };
    int held[HELD];
    int served = 0;
    int newest = -1;
    char from[32];
    for (int i = 0; i < HELD; i++) {
        held[i] = testraw_dial_from(c->port, filler_address(i, from, sizeof(from)));
        struct testraw_reply r;
        if (!testraw_send_str(held[i], HEALTHZ) || !testraw_read_reply(held[i], &r))
            continue; /* turned away before the request was read */
        if (r.status == 200) {
            served++;
            newest = i;
        } else if (r.status != 503 || strstr(r.body, "too_many_connections") == NULL) {
            fail_msg("connection %d from %s: %d %s", i, from, r.status, r.body);
        }
    }
    /* Every slot is an idle keep-alive connection now; the rest met the per-address limit. */
    assert_int_equal(served, SLOTS);

    int first = expect_served(c, "127.0.0.1", "600 idle keep-alive connections held");
    int second = expect_served(c, "127.0.0.10", "600 idle keep-alive connections held");

    /*
     * The two slots came from the oldest idle connections; the newest one still works. "Oldest"
     * is when the server saw a connection go idle: a handler thread answers before it hands the
     * connection back, so two connections answered one right after the other may go idle in
     * either order. Two of the four oldest, then.
     */
    char extra[256];
    int closed = 0;
    for (int i = 0; i < 4 && closed < 2; i++)
        closed += testraw_closed_within(held[i], 1000, extra, sizeof(extra));
    if (closed != 2)
        fail_msg("%d of the 4 oldest idle connections were closed for the 2 new clients", closed);
    struct testraw_reply r;
    if (!testraw_send_str(held[newest], HEALTHZ) || !testraw_read_reply(held[newest], &r))
        fail_msg("the newest idle connection (%d) was closed", newest);
    assert_int_equal(r.status, 200);

    close(first);
    close(second);
    for (int i = 0; i < HELD; i++)
        close(held[i]);
    stop(c);
}

/* ---- slow request heads ---- */

static void test_slow_heads_do_not_take_every_slot(void **state)
{
    struct testhttp_daemon *c = *state;
    start(c, NULL); /* the defaults: 512 slots, 10 s for a head */

    /* Even connections start a head and never finish it, odd ones send nothing. */
    int held[SLOTS];
    char from[32];
    for (int i = 0; i < SLOTS; i++) {
        held[i] = testraw_dial_from(c->port, filler_address(i, from, sizeof(from)));
        if (i % 2 == 0)
            (void)testraw_send_str(held[i], "GET /healthz HTTP/1.1\r\nHost: t\r\n");
    }
    /*
     * Wait until the server has read every head: it refuses the oldest beyond the quarter of the
     * slots at once, so SLOTS / 4 answered heads mean all SLOTS / 2 were read. A head the server
     * has not read yet is a silent connection to it, and may be closed to admit the new client.
     */
    int answered = 0;
    for (int64_t t0 = txo_monotonic_ms(); txo_monotonic_ms() - t0 < 10000; txo_sleep_ms(20)) {
        answered = 0;
        for (int i = 0; i < SLOTS; i += 2)
            answered += !still_open(held[i]);
        if (answered >= SLOTS / 4)
            break;
    }
    if (answered != SLOTS / 4)
        fail_msg("%d slow heads were answered within 10 s, want %d", answered, SLOTS / 4);
    close(expect_served(c, "127.0.0.1", "256 slow heads and 256 silent connections"));

    /* Slowloris: every head gets one more header line, then another client comes. */
    for (int i = 0; i < SLOTS; i += 2)
        (void)testraw_send_str(held[i], "X-Slow: a\r\n");
    txo_sleep_ms(200);
    close(expect_served(c, "127.0.0.10", "256 slow heads trickling, 256 silent connections"));

    /*
     * Over the cap the oldest requests still being read were refused with 408 and the rest are
     * read on: exactly max_reading (a quarter of the slots) are left. Which ones is the order
     * the server read their first bytes in, which the kernel does not promise to be the order
     * they were dialled in, so the test counts them.
     */
    int refused = 0;
    int reading = 0;
    for (int i = 0; i < SLOTS; i += 2) {
        if (still_open(held[i])) {
            reading++;
            continue;
        }
        struct testraw_reply r;
        errno = 0;
        if (!testraw_read_reply(held[i], &r))
            fail_msg("slow head %d was closed without an answer (%s)", i,
                     errno != 0 ? strerror(errno) : "EOF");
        if (r.status != 408 || strstr(r.body, "request_timeout") == NULL)
            fail_msg("slow head %d: %d %s, want 408 request_timeout", i, r.status, r.body);
        refused++;
    }
    print_message("%d slow heads refused with 408, %d still read\n", refused, reading);
    assert_int_equal(reading, SLOTS / 4);
    assert_int_equal(refused, SLOTS / 2 - SLOTS / 4);

    for (int i = 0; i < SLOTS; i++)
        close(held[i]);
    stop(c);
}

/* ---- memory after connection waves ---- */

/* The resident set of pid, in kB. */
static long rss_kb(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("%s: %s", path, strerror(errno));
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    if (kb < 0)
        fail_msg("%s has no VmRSS line", path);
    return kb;
}

/* n connections from 127.0.1.1 on (250 per address), each served once, then all closed. */
static void wave(struct testhttp_daemon *c, int n, const char *request, long *peak_kb)
{
    int *fds = calloc((size_t)n, sizeof(int));
    assert_non_null(fds);
    char from[32];
    for (int i = 0; i < n; i++) {
        snprintf(from, sizeof(from), "127.0.%d.%d", 1 + i / 250, 1 + i % 250);
        fds[i] = testraw_dial_from(c->port, from);
        if (!testraw_send_str(fds[i], request))
            fail_msg("wave: connection %d was closed before its request", i);
    }
    for (int i = 0; i < n; i++) {
        struct testraw_reply r;
        if (!testraw_read_reply(fds[i], &r) || r.status != 200)
            fail_msg("wave: connection %d was not served", i);
    }
    *peak_kb = rss_kb(c->srv.pid);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    free(fds);
}

static void test_memory_returns_after_connection_waves(void **state)
{
    struct testhttp_daemon *c = *state;
    if (SANITIZED) {
        print_message("skipped: a sanitizer's allocator keeps freed memory on purpose\n");
        skip();
    }
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < 2 * WAVE + 256) {
        print_message("skipped: RLIMIT_NOFILE is %lu, the waves need %d\n",
                      (unsigned long)rl.rlim_cur, 2 * WAVE + 256);
        skip();
    }
    const char *args[] = {"--max-connections", "10000", "--max-connections-per-client", "0", NULL};
    start(c, args);

    static char request[4200];
    char pad[4001];
    memset(pad, 'p', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    snprintf(request, sizeof(request), "GET /healthz HTTP/1.1\r\nHost: t\r\nCookie: %s\r\n\r\n",
             pad);

    long warm_kb = 0;
    wave(c, 500, request, &warm_kb);
    txo_sleep_ms(500);
    long start_kb = rss_kb(c->srv.pid);
    long after_kb = 0;
    for (int w = 1; w <= 3; w++) {
        long peak_kb = 0;
        wave(c, WAVE, request, &peak_kb);
        /* The server has seen the closes once a new connection is served; its sweep (every
         * 100 ms) then trims. Up to 3 s for a loaded machine. */
        txo_sleep_ms(300);
        int fd = testraw_dial_from(c->port, "127.0.0.1");
        struct testraw_reply r;
        assert_true(testraw_send_str(fd, HEALTHZ) && testraw_read_reply(fd, &r));
        close(fd);
        for (int64_t t0 = txo_monotonic_ms(); txo_monotonic_ms() - t0 < 3000;) {
            after_kb = rss_kb(c->srv.pid);
            if (after_kb - start_kb <= KEPT_KB)
                break;
            txo_sleep_ms(100);
        }
        print_message("wave %d of %d connections: VmRSS %ld kB at start, %ld kB with them open, "
                      "%ld kB after\n",
                      w, WAVE, start_kb, peak_kb, after_kb);
        if (after_kb - start_kb > KEPT_KB)
            fail_msg("wave %d: the server kept %ld kB of the %ld kB the wave added, more than %d",
                     w, after_kb - start_kb, peak_kb - start_kb, KEPT_KB);
    }
    if (after_kb > 2 * start_kb)
        fail_msg("VmRSS %ld kB after three waves of %d connections, more than twice the %ld kB "
                 "at start",
                 after_kb, WAVE, start_kb);
    stop(c);
}

int main(void)
{
    /* Before any server starts: it inherits the limit. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_connections_yield_to_new_clients),
        cmocka_unit_test(test_slow_heads_do_not_take_every_slot),
        cmocka_unit_test(test_memory_returns_after_connection_waves),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, testhttp_daemon_free_state, NULL, NULL);
}
