/*
 * How the daemons tell their supervisor how they are doing: the systemd notify protocol
 * (sd_notify(3)) when NOTIFY_SOCKET is set, nothing otherwise, so the same binary runs under
 * systemd (Type=notify), a shell or a test. Every call is a no-op without a supervisor.
 *
 * A daemon's life, as systemd sees it:
 *   notify_init()                        watchdog pings while the main thread waits, if
 *                                        WATCHDOG_USEC is set (WatchdogSec=);
 *   daemon_db_wait()                     STATUS=waiting for the database, until it answers;
 *   notify_ready("...")                  READY=1 and a STATUS line, once serving;
 *   notify_stopping()                    STOPPING=1, when the graceful stop begins.
 *
 * Main thread only (the pings come from signals_wait() and signals_sleep()).
 */
#ifndef TXO_CMD_NOTIFY_H
#define TXO_CMD_NOTIFY_H

#include "settings.h"

/* Starts the watchdog pings when the supervisor asked for them. */
void notify_init(void);

/* READY=1 with STATUS=<status>. */
void notify_ready(const char *status);

/* STATUS=<status> alone (not ready, or a change while running). */
void notify_status(const char *status);

/* STOPPING=1. */
void notify_stopping(void);

/*
 * Connects with common->db, waiting while the database is unreachable (TXO_ECONNECT: a
 * transient error) with backoff from 250 ms to 5 s: logs the wait once and reports
 * STATUS=waiting for the database. Permanent errors (bad credentials, unknown database) fail
 * at once. Returns the connection (close with txo_db_close()), or NULL after printing a
 * message, with *sig set to SIGINT or SIGTERM when a signal ended the wait (the caller then
 * exits 0) and to 0 on an error. Call after signals_block().
 */
struct txo_db *daemon_db_wait(const char *cmd, const struct common_opts *common, int *sig);

/*
 * The rest of a daemon's life once its components run: READY=1 with STATUS=<ready>, then
 * signals_wait(), then STOPPING=1 and, when a signal ended the wait, a "stopping" line in the
 * log of cmd naming it. Returns what signals_wait() returned.
 */
int notify_run_until_stopped(const char *cmd, const char *ready);

#endif
