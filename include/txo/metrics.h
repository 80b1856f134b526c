/*
 * Metrics: a registry of Prometheus counters, gauges and histograms, rendered in the text
 * exposition format 0.0.4 (what GET /metrics answers).
 *
 * A family (struct txo_metric) is a metric name with its help text, type and label names; it
 * holds one child (one time series, or one histogram) per combination of label values, made
 * on first use. A family without labels has exactly one child from the start, so it is
 * rendered (as 0) before anything happened.
 *
 *     struct txo_metric *req = txo_metrics_register(reg, TXO_METRIC_COUNTER,
 *         "txo_http_requests_total", "HTTP requests answered.", 2,
 *         (const char *const[]){"route", "status"}, NULL, 0, err);
 *     ...
 *     txo_metric_inc(req, (const char *const[]){"/orders", "201"});
 *
 * Naming (docs/metrics.md): txo_<subsystem>_<name>_<unit>, counters end in _total,
 * durations are in seconds. Label values must come from a small set: never an id.
 *
 * Values that are expensive to keep up to date (rows per status in the database) are filled
 * in by collectors, which every render calls first.
 *
 * Lifetime: families belong to the registry and live until txo_metrics_free(); the pointer
 * txo_metrics_register() returns may be kept and used from any thread until then.
 *
 * Thread-safety: every function may be called from any thread, except txo_metrics_free().
 * Each family has its own mutex, so updates to different families never contend. Renders
 * are serialized, so collectors never run concurrently with each other.
 *
 * Misuse is a bug, not an error, and aborts (TXO_ASSERT): updating a family with a function
 * of another type, a negative counter increment, a NULL label value.
 */
#ifndef TXO_METRICS_H
#define TXO_METRICS_H

#include <stddef.h>

#include "txo/common.h"
#include "txo/err.h"

/* The Content-Type of txo_metrics_render()'s output. */
#define TXO_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* The counter of failed collector runs, registered by txo_metrics_new(). */
#define TXO_METRICS_COLLECTOR_ERRORS "txo_metrics_collector_errors_total"

enum txo_metric_type {
    TXO_METRIC_COUNTER,   /* only goes up (txo_metric_add with v >= 0, txo_metric_inc) */
    TXO_METRIC_GAUGE,     /* goes up and down (txo_metric_add, txo_metric_set) */
    TXO_METRIC_HISTOGRAM, /* counts observations in buckets (txo_metric_observe) */
};

/* "counter", "gauge", "histogram" (the # TYPE spelling); "INVALID" outside the enum. */
TXO_API const char *txo_metric_type_name(enum txo_metric_type type);

struct txo_metrics;
struct txo_metric;

/*
 * Creates an empty registry holding only TXO_METRICS_COLLECTOR_ERRORS.
 * Errors: TXO_ENOMEM. *out is written only on success; free with txo_metrics_free().
 */
TXO_API TXO_MUST_CHECK int txo_metrics_new(struct txo_metrics **out, struct txo_error *err);

/* Frees the registry and every family in it; NULL is a no-op. Nothing may use it any more. */
TXO_API void txo_metrics_free(struct txo_metrics *reg);

/*
 * Registers a family, or returns the one already registered under that name when type,
 * label names (same order) and, for histograms, buckets are the same (its help text stays
 * the first one given).
 *
 * name matches [a-zA-Z_:][a-zA-Z0-9_:]*; help is a non-empty UTF-8 string (copied); label
 * names (n_labels of them, copied; label_names may be NULL when n_labels is 0) match
 * [a-zA-Z_][a-zA-Z0-9_]*, do not start with "__", are distinct, and a histogram may not
 * have one named "le".
 *
 * buckets (histograms only, ignored otherwise): n_buckets strictly increasing finite upper
 * bounds, copied; a last +Inf is allowed and dropped, as the +Inf bucket is always there.
 * NULL means the default durations in seconds: .005 .01 .025 .05 .1 .25 .5 1 2.5 5 10.
 *
 * Returns the family (owned by the registry), or NULL with err set: TXO_EINVAL (a bad name,
 * label or bucket; the name taken by a family of another type, labels or buckets; the name
 * clashing with the _bucket, _sum or _count series of a histogram), TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK struct txo_metric *
txo_metrics_register(struct txo_metrics *reg, enum txo_metric_type type, const char *name,
                     const char *help, size_t n_labels, const char *const *label_names,
                     const double *buckets, size_t n_buckets, struct txo_error *err);

/*
 * txo_metrics_register() for a module registering its families one after another: does
 * nothing and returns NULL when reg is NULL or *rc < 0 already, and on failure sets *rc to the
 * error's code (err says why), so the caller checks *rc once after the last one.
 */
TXO_API struct txo_metric *txo_metrics_register_chained(struct txo_metrics *reg,
                                                        enum txo_metric_type type, const char *name,
                                                        const char *help, size_t n_labels,
                                                        const char *const *label_names, int *rc,
                                                        struct txo_error *err);

/* A family as a module describes it once, in a table, for registering it and finding it again
 * (default buckets for a histogram). */
struct txo_metric_desc {
    enum txo_metric_type type;
    const char *name;
    const char *help;
    size_t n_labels;
    const char *const *labels;
};

/*
 * Registers the n families of desc (txo_metrics_register(): the one already there when it
 * matches) and puts them into fam[0..n) (may be NULL). A module's scrape-time collector calls
 * it to find its families again. Errors as txo_metrics_register(); fam is then undefined.
 */
TXO_API TXO_MUST_CHECK int txo_metrics_register_table(struct txo_metrics *reg,
                                                      const struct txo_metric_desc *desc, size_t n,
                                                      struct txo_metric **fam,
                                                      struct txo_error *err);

/*
 * Updates the child for label_values: n_labels non-NULL strings (UTF-8, copied when the
 * child is made), in the order of the label names; ignored (may be NULL) when the family has
 * no labels. A child that cannot be made for lack of memory loses the update, with a
 * warning in the log.
 */

/* Counter: adds v (>= 0). Gauge: adds v (any sign). */
TXO_API void txo_metric_add(struct txo_metric *m, const char *const *label_values, double v);

/* txo_metric_add(m, label_values, 1). */
TXO_API void txo_metric_inc(struct txo_metric *m, const char *const *label_values);

/* Gauge only: sets the value to v. */
TXO_API void txo_metric_set(struct txo_metric *m, const char *const *label_values, double v);

/* Histogram only: counts v in the first bucket whose upper bound is >= v and adds v to the
 * sum. NaN is ignored. */
TXO_API void txo_metric_observe(struct txo_metric *m, const char *const *label_values, double v);

/* Counter or gauge: the child's current value, 0 when it does not exist (none is made). */
TXO_API double txo_metric_value(struct txo_metric *m, const char *const *label_values);

/*
 * Removes every child (a family without labels gets its zero child back). For collectors
 * that rebuild a labelled gauge from scratch, so label values that disappeared stop being
 * rendered; renders are serialized with collectors, so none sees the family half rebuilt.
 */
TXO_API void txo_metric_reset(struct txo_metric *m);

/* The family's name; valid until txo_metrics_free(). */
TXO_API const char *txo_metric_name(const struct txo_metric *m);

/*
 * A collector refreshes families (usually gauges) right before a render: it may register
 * families and update any family of reg, but must not call txo_metrics_render() or
 * txo_metrics_add_collector(). Returns 0 or a negative TXO_E* code with detail in err.
 */
typedef int (*txo_metrics_collect_fn)(void *arg, struct txo_metrics *reg, struct txo_error *err);

/*
 * Adds a collector; every later render calls the collectors in the order they were added.
 * A failing collector does not fail the render: it increments
 * txo_metrics_collector_errors_total and logs a warning (component "metrics"), and the
 * families it maintains keep their previous values. arg is borrowed and must outlive the
 * registry. Errors: TXO_EINVAL (fn NULL), TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_metrics_add_collector(struct txo_metrics *reg,
                                                     txo_metrics_collect_fn fn, void *arg,
                                                     struct txo_error *err);

/*
 * Adds what every Prometheus client exports about its process, read from procfs at each
 * render: process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds and
 * process_start_time_seconds; and txo_build_info{version,revision} (1), the library's version
 * and the git revision it was built from ("unknown" outside a checkout). Linux only.
 * Errors: TXO_EIO (procfs unreadable), TXO_EINVAL (one of these names already taken by a
 * family of another shape), TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_metrics_add_process(struct txo_metrics *reg, struct txo_error *err);

/*
 * Runs the collectors, then renders every family in text format 0.0.4: families sorted by
 * name, each with its # HELP and # TYPE lines, then its children sorted by label values.
 * Histograms render cumulative name_bucket{...,le="..."} lines ending with le="+Inf", then
 * name_sum and name_count. Label values are escaped (\\, \", \n) and help text too (\\, \n);
 * invalid UTF-8 is replaced by U+FFFD. Numbers: integers of magnitude below 2^53 without
 * exponent or decimals, other values in the shortest %g form that reads back exactly,
 * +Inf, -Inf and NaN spelled so.
 *
 * On success *out receives the NUL-terminated text (free it with txo_free()) and *len its
 * length without the NUL. Errors: TXO_ENOMEM (nothing is written to *out then).
 */
TXO_API TXO_MUST_CHECK int txo_metrics_render(struct txo_metrics *reg, char **out, size_t *len,
                                              struct txo_error *err);

#endif
