/*
 * The outbox's gauges (include/txo/outbox.h: txo_outbox_metrics_register/_collect), read from
 * the tables at each scrape with txo_outbox_get_stats(): the backlog, the relay's lag, what
 * waits for a retry and the oldest event a relay could claim now, FAILED events, dead letters.
 */
#include "core/common.h"

#include "txo/metrics.h"
#include "txo/outbox.h"

enum {
    M_PENDING,
    M_FAILED,
    M_OLDEST,
    M_OLDEST_FAILED,
    M_RETRY_WAITING,
    M_OLDEST_DUE,
    M_DEAD,
    M_COUNT
};

static const struct txo_metric_desc families[M_COUNT] = {
    [M_PENDING] = {TXO_METRIC_GAUGE, "txo_outbox_pending",
                   "Outbox events waiting to be published (PENDING).", 0, NULL},
    [M_FAILED] = {TXO_METRIC_GAUGE, "txo_outbox_failed",
                  "Outbox events FAILED after the attempt limit.", 0, NULL},
    [M_OLDEST] = {TXO_METRIC_GAUGE, "txo_outbox_oldest_pending_age_seconds",
                  "The relay's lag: now minus created_at of the oldest event not yet published "
                  "(PENDING or PROCESSING, due or backing off); 0 when none.",
                  0, NULL},
    [M_OLDEST_FAILED] = {TXO_METRIC_GAUGE, "txo_outbox_oldest_failed_age_seconds",
                         "Now minus created_at of the oldest FAILED event; 0 when none.", 0, NULL},
    [M_RETRY_WAITING] = {TXO_METRIC_GAUGE, "txo_outbox_retry_waiting",
                         "PENDING outbox events waiting for a retry (next_attempt_at in the "
                         "future).",
                         0, NULL},
    [M_OLDEST_DUE] = {TXO_METRIC_GAUGE, "txo_outbox_oldest_due_age_seconds",
                      "Now minus created_at of the oldest PENDING event a relay could claim (due, "
                      "not held back behind a parked aggregate); grows when the relay stalls; 0 "
                      "when none.",
                      0, NULL},
    [M_DEAD] = {TXO_METRIC_GAUGE, "txo_outbox_dead_letters", "Rows in dead_letter_events.", 0,
                NULL},
};

int txo_outbox_metrics_register(struct txo_metrics *reg, struct txo_error *err)
{
    return txo_metrics_register_table(reg, families, M_COUNT, NULL, err);
}

int txo_outbox_metrics_collect(struct txo_metrics *reg, struct txo_db *db, struct txo_error *err)
{
    struct txo_metric *fam[M_COUNT];
    struct txo_outbox_stats os;
    int rc = txo_metrics_register_table(reg, families, M_COUNT, fam, err);
    if (rc == 0)
        rc = txo_outbox_get_stats(db, &os, err);
    if (rc < 0)
        return rc;
    txo_metric_set(fam[M_PENDING], NULL, (double)os.pending);
    txo_metric_set(fam[M_FAILED], NULL, (double)os.failed);
    txo_metric_set(fam[M_OLDEST], NULL, os.oldest_pending_age_s);
    txo_metric_set(fam[M_OLDEST_FAILED], NULL, os.oldest_failed_age_s);
    txo_metric_set(fam[M_RETRY_WAITING], NULL, (double)os.retry_waiting);
    txo_metric_set(fam[M_OLDEST_DUE], NULL, os.oldest_due_age_s);
    txo_metric_set(fam[M_DEAD], NULL, (double)os.dead_letters);
    return 0;
}
