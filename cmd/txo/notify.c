/*
 * The systemd notify protocol for the daemons (notify.h), on libsystemd's sd_notify(): the
 * only file that includes <systemd/sd-daemon.h>, and it is linked into the `txo` command only.
 *
 * The watchdog ping comes from the main thread's signal wait, every half WatchdogSec: it proves
 * that the main thread, which owns start-up and shutdown, still runs; the component threads
 * report their own trouble in the log and the metrics.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

#include <systemd/sd-daemon.h>

#include "notify.h"
#include "cli_errors.h"
#include "signals.h"

#define DB_WAIT_FIRST_MS 250
#define DB_WAIT_MAX_MS   5000

static void watchdog_ping(void)
{
    (void)sd_notify(0, "WATCHDOG=1");
}

void notify_init(void)
{
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
        return;
    int64_t interval_ms = (int64_t)(usec / 2000);
    signals_set_tick(watchdog_ping, interval_ms > 0 ? interval_ms : 1);
    watchdog_ping();
}

void notify_ready(const char *status)
{
    (void)sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void notify_status(const char *status)
{
    (void)sd_notifyf(0, "STATUS=%s", status);
}

void notify_stopping(void)
{
    (void)sd_notify(0, "STOPPING=1\nSTATUS=stopping");
}

struct txo_db *daemon_db_wait(const char *cmd, const struct common_opts *common, int *sig)
{
    *sig = 0;
    int64_t delay_ms = DB_WAIT_FIRST_MS;
    bool waited = false;
    for (;;) {
        struct txo_db *db = NULL;
        struct txo_error err;
        txo_error_init(&err);
        int rc = txo_db_open(&common->db, &db, &err);
        if (rc == 0) {
            if (waited)
                TXO_LOG(TXO_LOG_INFO, cmd, "database reachable");
            return db;
        }
        if (rc != TXO_ECONNECT) {
            cli_error("txo %s: %s", cmd, err.msg);
            return NULL;
        }
        if (!waited) {
            /* Once: a server that stays down must not fill the log. */
            TXO_LOG(TXO_LOG_WARN, cmd, "waiting for the database (retrying with backoff)",
                    TXO_KV_I64("max_wait_s", DB_WAIT_MAX_MS / 1000), TXO_KV_STR("err", err.msg));
            notify_status("waiting for the database");
            waited = true;
        }
        *sig = signals_sleep(delay_ms);
        if (*sig != 0) {
            notify_stopping();
            TXO_LOG(TXO_LOG_INFO, cmd, "stopping while waiting for the database",
                    TXO_KV_I64("signal", *sig));
            return NULL;
        }
        delay_ms = delay_ms * 2 < DB_WAIT_MAX_MS ? delay_ms * 2 : DB_WAIT_MAX_MS;
    }
}

int notify_run_until_stopped(const char *cmd, const char *ready)
{
    notify_ready(ready);
    int sig = signals_wait();
    notify_stopping();
    if (sig != 0)
        TXO_LOG(TXO_LOG_INFO, cmd, "stopping", TXO_KV_I64("signal", sig));
    return sig;
}
