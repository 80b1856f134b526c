/*
 * How every daemon (txo serve, relay, worker, up, and txo-fake-services) stops: one mechanism,
 * used the same way by all of them.
 *
 *   1. signals_block() in the main thread, before the first thread starts (threads inherit
 *      the mask, so no thread is ever interrupted by SIGINT or SIGTERM, and no handler runs);
 *   2. start the components;
 *   3. signals_wait() in the main thread: it returns at the first SIGINT/SIGTERM (the caller
 *      then stops the components gracefully: work in flight finishes), or when a component
 *      called signals_wake() because it ended by itself (txo relay --drain, or on an error);
 *   4. from then on a second SIGINT/SIGTERM ends the process at once (the default action).
 *
 * SIGUSR1 is blocked too: it carries signals_wake() and is ignored when it comes from another
 * process. Not for library code: the library never touches signal dispositions.
 */
#ifndef TXO_CMD_SIGNALS_H
#define TXO_CMD_SIGNALS_H

#include <stdint.h>

/* Blocks SIGINT, SIGTERM and SIGUSR1 in this thread and every thread created after. */
void signals_block(void);

/*
 * Waits for SIGINT or SIGTERM (returns its number) or for signals_wake() (returns 0). Call it
 * once, from the thread that called signals_block(). Afterwards a second SIGINT or SIGTERM
 * terminates the process.
 */
int signals_wait(void);

/*
 * Sleeps ms milliseconds, or less when SIGINT or SIGTERM comes (returns its number; 0 when the
 * time is up). For waits before signals_wait(), such as for the database at start-up; a
 * signals_wake() meanwhile only ends the sleep. Same thread as signals_block().
 */
int signals_sleep(int64_t ms);

/*
 * Has signals_wait() and signals_sleep() call fn every interval_ms while they wait (fn NULL or
 * interval_ms <= 0: none). Call before the waits, from the thread that waits.
 */
void signals_set_tick(void (*fn)(void), int64_t interval_ms);

/* Makes signals_wait() return 0, from any thread, before or during the wait. */
void signals_wake(void);

#endif
