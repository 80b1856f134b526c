/*
 * What the library's modules share about their metrics beyond the public registry API
 * (include/txo/metrics.h). Private to the library.
 */
#ifndef TXO_METRICS_INTERNAL_H
#define TXO_METRICS_INTERNAL_H

#include "txo/metrics.h"

/*
 * Registers, as txo_metrics_register_chained() does (nothing when reg is NULL or *rc < 0
 * already; *rc set on failure), a histogram of an event's delay in seconds, from its insert in
 * its producer's transaction to the point of its life that name says, labelled by
 * aggregate_type, with buckets from 1 ms to 60 s. The relay's publish delay and the worker's
 * consume delay are such histograms, so that their buckets line up on one dashboard.
 */
struct txo_metric *txo__metrics_register_event_delay(struct txo_metrics *reg, const char *name,
                                                     const char *help, int *rc,
                                                     struct txo_error *err);

#endif
