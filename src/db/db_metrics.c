/*
 * The database layer's counters (include/txo/db.h: txo_db_metrics_register/_collect): what the
 * connections of this process met, kept in atomics by the library (txo_db_get_stats) and moved
 * up to their current value at each scrape. A counter's own value is what was already added,
 * so the collector keeps no state.
 */
#include "core/common.h"

#include "txo/metrics.h"

enum { M_DEADLOCKS, M_LOCK_TIMEOUTS, M_CONN_LOST, M_TX_RETRIES, M_COUNT };

static const struct txo_metric_desc families[M_COUNT] = {
    [M_DEADLOCKS] = {TXO_METRIC_COUNTER, "txo_mysql_deadlocks_total",
                     "Deadlocks (MySQL 1213) this process met; the transaction was retried.", 0,
                     NULL},
    [M_LOCK_TIMEOUTS] = {TXO_METRIC_COUNTER, "txo_mysql_lock_timeouts_total",
                         "Lock wait timeouts (MySQL 1205) this process met.", 0, NULL},
    [M_CONN_LOST] = {TXO_METRIC_COUNTER, "txo_mysql_connections_lost_total",
                     "Database connections lost (2006/2013) and reopened.", 0, NULL},
    [M_TX_RETRIES] = {TXO_METRIC_COUNTER, "txo_mysql_transaction_retries_total",
                      "Transactions run again after a transient error.", 0, NULL},
};

int txo_db_metrics_register(struct txo_metrics *reg, struct txo_error *err)
{
    return txo_metrics_register_table(reg, families, M_COUNT, NULL, err);
}

static void counter_to(struct txo_metric *m, uint64_t value)
{
    double have = txo_metric_value(m, NULL);
    if ((double)value > have)
        txo_metric_add(m, NULL, (double)value - have);
}

int txo_db_metrics_collect(struct txo_metrics *reg, struct txo_error *err)
{
    struct txo_metric *fam[M_COUNT];
    int rc = txo_metrics_register_table(reg, families, M_COUNT, fam, err);
    if (rc < 0)
        return rc;
    struct txo_db_stats st;
    txo_db_get_stats(&st);
    counter_to(fam[M_DEADLOCKS], st.deadlocks);
    counter_to(fam[M_LOCK_TIMEOUTS], st.lock_timeouts);
    counter_to(fam[M_CONN_LOST], st.conn_lost);
    counter_to(fam[M_TX_RETRIES], st.tx_retries);
    return 0;
}
