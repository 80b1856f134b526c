/*
 * The sagas' gauges (include/txo/saga.h: txo_saga_metrics_register/_collect), read from the
 * tables at each scrape: sagas per status, the given-up compensations, and the stuck ones as
 * txo saga list --stuck shows them.
 */
#include "core/common.h"

#include "txo/metrics.h"
#include "txo/saga.h"

/* A running saga with no live owner for this long counts as stuck. */
#define STUCK_IDLE_S 60
/* Stuck sagas counted per scrape at most. */
#define STUCK_MAX 100

enum { M_SAGAS, M_ABANDONED, M_STUCK, M_COUNT };

static const char *const by_status[] = {"status"};

static const struct txo_metric_desc families[M_COUNT] = {
    [M_SAGAS] = {TXO_METRIC_GAUGE, "txo_sagas",
                 "Sagas per status (RUNNING, COMPENSATING and COMPENSATION_FAILED are the ones "
                 "to watch).",
                 1, by_status},
    [M_ABANDONED] = {TXO_METRIC_GAUGE, "txo_saga_compensation_abandoned",
                     "COMPENSATION_FAILED sagas the engine gave up retrying automatically: an "
                     "operator must look (txo saga show / retry).",
                     0, NULL},
    [M_STUCK] = {TXO_METRIC_GAUGE, "txo_sagas_stuck",
                 "Sagas no worker has run for 60 s (RUNNING/COMPENSATING with no live owner), "
                 "RUNNING ones past a deadline (even under a live owner) and the given-up "
                 "COMPENSATION_FAILED ones, up to 100 (txo saga list --stuck).",
                 0, NULL},
};

int txo_saga_metrics_register(struct txo_metrics *reg, struct txo_error *err)
{
    return txo_metrics_register_table(reg, families, M_COUNT, NULL, err);
}

int txo_saga_metrics_collect(struct txo_metrics *reg, struct txo_db *db, struct txo_error *err)
{
    struct txo_metric *fam[M_COUNT];
    struct txo_saga_counts sc;
    struct txo_saga_ref stuck[STUCK_MAX];
    size_t n_stuck = 0;
    int rc = txo_metrics_register_table(reg, families, M_COUNT, fam, err);
    if (rc == 0)
        rc = txo_saga_count(db, &sc, err);
    if (rc == 0)
        rc = txo_saga_list_stuck(db, STUCK_IDLE_S, STUCK_MAX, stuck, &n_stuck, err);
    if (rc < 0)
        return rc;
    for (int s = 0; s < TXO_SAGA_STATUS_COUNT; s++) {
        const char *labels[] = {txo_saga_status_name((enum txo_saga_status)s)};
        txo_metric_set(fam[M_SAGAS], labels, (double)sc.by_status[s]);
    }
    txo_metric_set(fam[M_ABANDONED], NULL, (double)sc.abandoned);
    txo_metric_set(fam[M_STUCK], NULL, (double)n_stuck);
    return 0;
}
