/*
 * The metrics registry and its Prometheus text rendering (include/txo/metrics.h).
 *
 * Data:
 *   registry  a sorted array of families (binary search by name; sorted is also the render
 *             order) and an array of collectors, both behind reg->mu. Families are never
 *             removed before txo_metrics_free(), so a pointer taken under the lock stays
 *             valid after it is dropped.
 *   family    name, help, type, label names and histogram bounds, all immutable after
 *             registration, and a hash table of children (chained, FNV-1a over the label
 *             values) behind the family's own mutex, so hot updates to different families
 *             never contend. A family without labels has one child from the start.
 *   child     one allocation: the struct, then (histograms) n_buckets + 1 non-cumulative
 *             bucket counts, the last one for values above every bound, then the label value
 *             pointers (NULL-terminated) and the label value strings.
 *
 * Rendering holds reg->render_mu throughout, so collectors never run concurrently; it calls
 * them holding no other lock (they register families and update them), then snapshots the
 * family array, then renders each family under its own mutex, so each family is consistent
 * (a histogram's buckets, sum and count agree) though two families may be a few updates
 * apart. Bucket counts are kept per bucket and summed into cumulative ones while rendering,
 * so an observation touches one counter.
 *
 * Numbers are formatted with snprintf/strtod, which follow LC_NUMERIC: the host must keep
 * the "C" numeric locale (the default unless it calls setlocale).
 *
 * Lock order: render_mu, then reg->mu or one family's mu; reg->mu and a family's mu are never
 * held together.
 */
#include "core/common.h"

#include "core/buf.h"

#include <math.h>
#include <pthread.h>

#include "txo/metrics.h"
#include "metrics/metrics_internal.h"

/* Longest formatted number, "-2.2250738585072014e-308" and the NUL, with room to spare. */
#define NUM_MAX 32

static const double default_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                         0.5,   1.0,  2.5,   5.0,  10.0};

struct child {
    struct child *next; /* hash chain */
    uint64_t hash;
    double value;        /* counter, gauge */
    double sum;          /* histogram */
    uint64_t count;      /* histogram */
    uint64_t *counts;    /* histogram: n_buckets + 1 entries, inside this allocation */
    const char **values; /* n_labels strings then NULL, inside this allocation */
};

/* The child's trailing arrays start right after it and need no padding. */
_Static_assert(sizeof(struct child) % _Alignof(uint64_t) == 0, "child alignment");
_Static_assert(_Alignof(const char *) <= _Alignof(uint64_t), "pointer alignment");

struct txo_metric {
    enum txo_metric_type type;
    char *name;
    char *help;
    size_t n_labels;
    char **label_names;
    size_t n_buckets;
    double *buckets;
    char (*le)[NUM_MAX]; /* the bounds as rendered in le="..." */
    pthread_mutex_t mu;  /* guards the children */
    struct child **slots;
    size_t n_slots; /* a power of two */
    size_t n_children;
};

struct collector {
    txo_metrics_collect_fn fn;
    void *arg;
};

struct txo_metrics {
    pthread_mutex_t mu;        /* guards families and collectors */
    pthread_mutex_t render_mu; /* one render (with its collectors) at a time */
    struct txo_metric **families;
    size_t n_families;
    size_t cap_families;
    struct collector *collectors;
    size_t n_collectors;
    size_t cap_collectors;
    struct txo_metric *collector_errors;
};

static const char *const type_names[] = {
    [TXO_METRIC_COUNTER] = "counter",
    [TXO_METRIC_GAUGE] = "gauge",
    [TXO_METRIC_HISTOGRAM] = "histogram",
};

const char *txo_metric_type_name(enum txo_metric_type type)
{
    return txo__name_of(type_names, TXO_ARRAY_LEN(type_names), (long)type);
}

/*
 * Number formatting: what Prometheus parses (Go's strconv.ParseFloat) and reads well.
 * Integers below 2^53 are exact in a double and print without exponent; other values get
 * the fewest significant digits that read back as the same double.
 */
static void format_number(double v, char out[NUM_MAX])
{
    if (isnan(v)) {
        snprintf(out, NUM_MAX, "NaN");
    } else if (isinf(v)) {
        snprintf(out, NUM_MAX, "%s", v > 0 ? "+Inf" : "-Inf");
    } else if (v == 0.0) {
        snprintf(out, NUM_MAX, "0"); /* also -0 */
    } else if (fabs(v) < 0x1p53 && v == trunc(v)) {
        snprintf(out, NUM_MAX, "%.0f", v);
    } else {
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(out, NUM_MAX, "%.*g", prec, v);
            if (strtod(out, NULL) == v)
                break;
        }
    }
}

/* ---- validation ---- */

static bool valid_metric_name(const char *s)
{
    if (s == NULL || s[0] == '\0')
        return false;
    for (size_t i = 0; s[i] != '\0'; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                  (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return false;
    }
    return true;
}

static bool valid_label_name(const char *s)
{
    if (s == NULL || s[0] == '\0' || (s[0] == '_' && s[1] == '_'))
        return false;
    for (size_t i = 0; s[i] != '\0'; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                  (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return false;
    }
    return true;
}

/* Checks the bounds and drops a last +Inf. NULL means the defaults. */
static int normalize_buckets(const char *name, const double *buckets, size_t n, const double **out,
                             size_t *n_out, struct txo_error *err)
{
    if (buckets == NULL) {
        *out = default_buckets;
        *n_out = TXO_ARRAY_LEN(default_buckets);
        return 0;
    }
    if (n > 0 && isinf(buckets[n - 1]) && buckets[n - 1] > 0)
        n--;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(buckets[i]))
            return txo_error_set(err, TXO_EINVAL, "metric %s: bucket %zu is not finite", name, i);
        if (i > 0 && !(buckets[i] > buckets[i - 1]))
            return txo_error_set(err, TXO_EINVAL,
                                 "metric %s: buckets must be strictly increasing (bucket %zu)",
                                 name, i);
    }
    *out = buckets;
    *n_out = n;
    return 0;
}

static int check_labels(const char *name, enum txo_metric_type type, size_t n_labels,
                        const char *const *label_names, struct txo_error *err)
{
    if (n_labels > 0 && label_names == NULL)
        return txo_error_set(err, TXO_EINVAL, "metric %s: %zu label names expected, got NULL", name,
                             n_labels);
    for (size_t i = 0; i < n_labels; i++) {
        const char *l = label_names[i];
        if (!valid_label_name(l))
            return txo_error_set(err, TXO_EINVAL, "metric %s: invalid label name \"%s\"", name,
                                 l != NULL ? l : "(null)");
        if (type == TXO_METRIC_HISTOGRAM && strcmp(l, "le") == 0)
            return txo_error_set(err, TXO_EINVAL,
                                 "metric %s: a histogram cannot have a label named le", name);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(label_names[j], l) == 0)
                return txo_error_set(err, TXO_EINVAL, "metric %s: label %s given twice", name, l);
        }
    }
    return 0;
}

/* ---- children ---- */

static uint64_t hash_values(const struct txo_metric *m, const char *const *values)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a 64 */

    for (size_t i = 0; i < m->n_labels; i++) {
        TXO_ASSERT(values[i] != NULL);
        for (const unsigned char *p = (const unsigned char *)values[i]; *p != '\0'; p++) {
            h ^= *p;
            h *= UINT64_C(0x100000001b3);
        }
        h ^= 0xFF; /* separator: {"ab",""} and {"a","b"} hash apart */
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

static bool same_values(const struct txo_metric *m, const struct child *c,
                        const char *const *values)
{
    for (size_t i = 0; i < m->n_labels; i++) {
        if (strcmp(c->values[i], values[i]) != 0)
            return false;
    }
    return true;
}

/* Doubles the table; on failure keeps the old one (chains just get longer). */
static void grow_slots(struct txo_metric *m)
{
    size_t n = m->n_slots * 2;
    struct child **slots = txo_calloc(n, sizeof(*slots));
    if (slots == NULL)
        return;
    for (size_t i = 0; i < m->n_slots; i++) {
        struct child *c = m->slots[i];
        while (c != NULL) {
            struct child *next = c->next;
            size_t k = (size_t)c->hash & (n - 1);
            c->next = slots[k];
            slots[k] = c;
            c = next;
        }
    }
    txo_free(m->slots);
    m->slots = slots;
    m->n_slots = n;
}

/* Makes and inserts the child for values. Caller holds m->mu. NULL when out of memory. */
static struct child *make_child(struct txo_metric *m, const char *const *values, uint64_t hash)
{
    size_t n_counts = m->type == TXO_METRIC_HISTOGRAM ? m->n_buckets + 1 : 0;
    size_t size = sizeof(struct child) + n_counts * sizeof(uint64_t) +
                  (m->n_labels + 1) * sizeof(const char *);
    for (size_t i = 0; i < m->n_labels; i++)
        size += strlen(values[i]) + 1;

    struct child *c = txo_calloc(1, size);
    if (c == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)(c + 1);
    c->counts = (uint64_t *)(void *)p;
    p += n_counts * sizeof(uint64_t);
    c->values = (const char **)(void *)p;
    p += (m->n_labels + 1) * sizeof(const char *);
    for (size_t i = 0; i < m->n_labels; i++) {
        size_t len = strlen(values[i]) + 1;
        memcpy(p, values[i], len);
        c->values[i] = (const char *)p;
        p += len;
    }
    c->values[m->n_labels] = NULL;
    c->hash = hash;

    if ((m->n_children + 1) * 4 > m->n_slots * 3) /* load factor 3/4 */
        grow_slots(m);
    size_t k = (size_t)hash & (m->n_slots - 1);
    c->next = m->slots[k];
    m->slots[k] = c;
    m->n_children++;
    return c;
}

/* Finds the child for values, making it when create is set. Caller holds m->mu. */
static struct child *child_for(struct txo_metric *m, const char *const *values, bool create)
{
    if (m->n_labels > 0)
        TXO_ASSERT(values != NULL);
    uint64_t hash = hash_values(m, values);
    for (struct child *c = m->slots[(size_t)hash & (m->n_slots - 1)]; c != NULL; c = c->next) {
        if (c->hash == hash && same_values(m, c, values))
            return c;
    }
    return create ? make_child(m, values, hash) : NULL;
}

static void warn_dropped(const struct txo_metric *m)
{
    TXO_LOG(TXO_LOG_WARN, "metrics", "out of memory, update dropped",
            TXO_KV_STR("metric", m->name));
}

/* ---- families ---- */

static void free_family(struct txo_metric *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; m->slots != NULL && i < m->n_slots; i++) {
        struct child *c = m->slots[i];
        while (c != NULL) {
            struct child *next = c->next;
            txo_free(c);
            c = next;
        }
    }
    txo_free(m->slots);
    for (size_t i = 0; m->label_names != NULL && i < m->n_labels; i++)
        txo_free(m->label_names[i]);
    txo_free(m->label_names);
    txo_free(m->buckets);
    txo_free(m->le);
    txo_free(m->help);
    txo_free(m->name);
    pthread_mutex_destroy(&m->mu);
    txo_free(m);
}

/* A new family from validated arguments; NULL when out of memory. */
static struct txo_metric *new_family(enum txo_metric_type type, const char *name, const char *help,
                                     size_t n_labels, const char *const *label_names,
                                     const double *buckets, size_t n_buckets)
{
    struct txo_metric *m = txo_calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    pthread_mutex_init(&m->mu, NULL);
    m->type = type;
    m->n_labels = n_labels;
    m->name = txo_strdup(name);
    m->help = txo_strdup(help);
    m->n_slots = n_labels == 0 ? 2 : 8; /* 2: one child stays under the load factor */
    m->slots = txo_calloc(m->n_slots, sizeof(*m->slots));
    if (m->name == NULL || m->help == NULL || m->slots == NULL)
        goto fail;
    if (n_labels > 0) {
        m->label_names = txo_calloc(n_labels, sizeof(*m->label_names));
        if (m->label_names == NULL)
            goto fail;
        for (size_t i = 0; i < n_labels; i++) {
            m->label_names[i] = txo_strdup(label_names[i]);
            if (m->label_names[i] == NULL)
                goto fail;
        }
    }
    if (type == TXO_METRIC_HISTOGRAM) {
        m->n_buckets = n_buckets;
        /* One spare entry each so that a histogram with only the +Inf bucket allocates too. */
        m->buckets = txo_calloc(n_buckets + 1, sizeof(*m->buckets));
        m->le = txo_calloc(n_buckets + 1, sizeof(*m->le));
        if (m->buckets == NULL || m->le == NULL)
            goto fail;
        for (size_t i = 0; i < n_buckets; i++) {
            m->buckets[i] = buckets[i];
            format_number(buckets[i], m->le[i]);
        }
    }
    if (n_labels == 0 && make_child(m, NULL, hash_values(m, NULL)) == NULL)
        goto fail;
    return m;
fail:
    free_family(m);
    return NULL;
}

/* strcmp(name, head[0..head_len) followed by tail), without building the concatenation. */
static int cmp_name(const char *name, const char *head, size_t head_len, const char *tail)
{
    int c = strncmp(name, head, head_len);
    if (c != 0)
        return c;
    /* name may be shorter than head_len only if strncmp saw its NUL differ from head. */
    return strcmp(name + head_len, tail);
}

/*
 * Index of the family named head[0..head_len) + tail in the sorted array, or where it would
 * go. Caller holds reg->mu.
 */
static size_t family_pos(const struct txo_metrics *reg, const char *head, size_t head_len,
                         const char *tail, bool *found)
{
    size_t lo = 0;
    size_t hi = reg->n_families;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_name(reg->families[mid]->name, head, head_len, tail);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

static const struct txo_metric *find_family(const struct txo_metrics *reg, const char *head,
                                            size_t head_len, const char *tail)
{
    bool found;
    size_t pos = family_pos(reg, head, head_len, tail, &found);
    return found ? reg->families[pos] : NULL;
}

static const char *const histogram_suffixes[] = {"_bucket", "_sum", "_count"};

/* Whether name would render a series another family renders too. Caller holds reg->mu. */
static bool clashes(const struct txo_metrics *reg, enum txo_metric_type type, const char *name)
{
    size_t len = strlen(name);

    for (size_t i = 0; i < TXO_ARRAY_LEN(histogram_suffixes); i++) {
        const char *suffix = histogram_suffixes[i];
        size_t slen = strlen(suffix);
        /* name is a series of a histogram family: "<histogram>_bucket". */
        if (len > slen && strcmp(name + len - slen, suffix) == 0) {
            const struct txo_metric *h = find_family(reg, name, len - slen, "");
            if (h != NULL && h->type == TXO_METRIC_HISTOGRAM)
                return true;
        }
        /* name is a histogram and "<name>_sum" is a family. */
        if (type == TXO_METRIC_HISTOGRAM && find_family(reg, name, len, suffix) != NULL)
            return true;
    }
    return false;
}

/* Whether the registered family m is the one these arguments describe. */
static bool same_family(const struct txo_metric *m, enum txo_metric_type type, size_t n_labels,
                        const char *const *label_names, const double *buckets, size_t n_buckets)
{
    if (m->type != type || m->n_labels != n_labels)
        return false;
    for (size_t i = 0; i < n_labels; i++) {
        if (strcmp(m->label_names[i], label_names[i]) != 0)
            return false;
    }
    if (type != TXO_METRIC_HISTOGRAM)
        return true;
    if (m->n_buckets != n_buckets)
        return false;
    for (size_t i = 0; i < n_buckets; i++) {
        if (m->buckets[i] != buckets[i])
            return false;
    }
    return true;
}

struct txo_metric *txo_metrics_register(struct txo_metrics *reg, enum txo_metric_type type,
                                        const char *name, const char *help, size_t n_labels,
                                        const char *const *label_names, const double *buckets,
                                        size_t n_buckets, struct txo_error *err)
{
    TXO_ASSERT(reg != NULL);
    struct txo_metric *m = NULL;

    if (type != TXO_METRIC_COUNTER && type != TXO_METRIC_GAUGE && type != TXO_METRIC_HISTOGRAM) {
        txo_error_set(err, TXO_EINVAL, "metric %s: unknown type %d", name != NULL ? name : "",
                      (int)type);
        return NULL;
    }
    if (!valid_metric_name(name)) {
        txo_error_set(err, TXO_EINVAL, "invalid metric name \"%s\"",
                      name != NULL ? name : "(null)");
        return NULL;
    }
    if (help == NULL || help[0] == '\0' || !txo_utf8_valid(help, strlen(help))) {
        txo_error_set(err, TXO_EINVAL, "metric %s: help must be non-empty UTF-8 text", name);
        return NULL;
    }
    if (check_labels(name, type, n_labels, label_names, err) != 0)
        return NULL;
    const double *bounds = NULL;
    size_t n_bounds = 0;
    if (type == TXO_METRIC_HISTOGRAM &&
        normalize_buckets(name, buckets, n_buckets, &bounds, &n_bounds, err) != 0)
        return NULL;

    pthread_mutex_lock(&reg->mu);
    bool found;
    size_t pos = family_pos(reg, name, strlen(name), "", &found);
    if (found) {
        m = reg->families[pos];
        if (!same_family(m, type, n_labels, label_names, bounds, n_bounds)) {
            txo_error_set(err, TXO_EINVAL,
                          "metric %s is already registered as a %s with %zu labels and other "
                          "labels or buckets",
                          name, txo_metric_type_name(m->type), m->n_labels);
            m = NULL;
        }
        goto out;
    }
    if (clashes(reg, type, name)) {
        txo_error_set(err, TXO_EINVAL,
                      "metric %s clashes with the _bucket, _sum or _count series of a histogram",
                      name);
        goto out;
    }
    if (TXO_ARRAY_RESERVE(reg->families, reg->cap_families, reg->n_families + 1, 16) < 0) {
        txo_error_set(err, TXO_ENOMEM, "metric %s", name);
        goto out;
    }
    m = new_family(type, name, help, n_labels, label_names, bounds, n_bounds);
    if (m == NULL) {
        txo_error_set(err, TXO_ENOMEM, "metric %s", name);
        goto out;
    }
    memmove(&reg->families[pos + 1], &reg->families[pos],
            (reg->n_families - pos) * sizeof(*reg->families));
    reg->families[pos] = m;
    reg->n_families++;
out:
    pthread_mutex_unlock(&reg->mu);
    return m;
}

const char *txo_metric_name(const struct txo_metric *m)
{
    return m->name;
}

/* ---- updates ---- */

void txo_metric_add(struct txo_metric *m, const char *const *label_values, double v)
{
    TXO_ASSERT(m != NULL);
    TXO_ASSERT(m->type == TXO_METRIC_COUNTER || m->type == TXO_METRIC_GAUGE);
    if (m->type == TXO_METRIC_COUNTER)
        TXO_ASSERT(v >= 0.0); /* also rejects NaN */

    pthread_mutex_lock(&m->mu);
    struct child *c = child_for(m, label_values, true);
    if (c != NULL)
        c->value += v;
    pthread_mutex_unlock(&m->mu);
    if (c == NULL)
        warn_dropped(m);
}

void txo_metric_inc(struct txo_metric *m, const char *const *label_values)
{
    txo_metric_add(m, label_values, 1.0);
}

void txo_metric_set(struct txo_metric *m, const char *const *label_values, double v)
{
    TXO_ASSERT(m != NULL);
    TXO_ASSERT(m->type == TXO_METRIC_GAUGE);

    pthread_mutex_lock(&m->mu);
    struct child *c = child_for(m, label_values, true);
    if (c != NULL)
        c->value = v;
    pthread_mutex_unlock(&m->mu);
    if (c == NULL)
        warn_dropped(m);
}

void txo_metric_observe(struct txo_metric *m, const char *const *label_values, double v)
{
    TXO_ASSERT(m != NULL);
    TXO_ASSERT(m->type == TXO_METRIC_HISTOGRAM);
    if (isnan(v))
        return;

    /* The first bound >= v; past the end for values above every bound. */
    size_t lo = 0;
    size_t hi = m->n_buckets;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->buckets[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }

    pthread_mutex_lock(&m->mu);
    struct child *c = child_for(m, label_values, true);
    if (c != NULL) {
        c->counts[lo]++;
        c->count++;
        c->sum += v;
    }
    pthread_mutex_unlock(&m->mu);
    if (c == NULL)
        warn_dropped(m);
}

double txo_metric_value(struct txo_metric *m, const char *const *label_values)
{
    TXO_ASSERT(m != NULL);
    TXO_ASSERT(m->type == TXO_METRIC_COUNTER || m->type == TXO_METRIC_GAUGE);

    pthread_mutex_lock(&m->mu);
    const struct child *c = child_for(m, label_values, false);
    double v = c != NULL ? c->value : 0.0;
    pthread_mutex_unlock(&m->mu);
    return v;
}

void txo_metric_reset(struct txo_metric *m)
{
    TXO_ASSERT(m != NULL);

    pthread_mutex_lock(&m->mu);
    if (m->n_labels == 0) {
        /* The one child stays, zeroed: such a family always renders. */
        struct child *c = child_for(m, NULL, false);
        TXO_ASSERT(c != NULL);
        c->value = 0.0;
        c->sum = 0.0;
        c->count = 0;
        memset(c->counts, 0,
               (m->type == TXO_METRIC_HISTOGRAM ? m->n_buckets + 1 : 0) * sizeof(uint64_t));
    } else {
        for (size_t i = 0; i < m->n_slots; i++) {
            struct child *c = m->slots[i];
            while (c != NULL) {
                struct child *next = c->next;
                txo_free(c);
                c = next;
            }
            m->slots[i] = NULL;
        }
        m->n_children = 0;
    }
    pthread_mutex_unlock(&m->mu);
}

/* ---- registry ---- */

int txo_metrics_new(struct txo_metrics **out, struct txo_error *err)
{
    struct txo_metrics *reg = txo_calloc(1, sizeof(*reg));
    if (reg == NULL)
        return txo_error_set(err, TXO_ENOMEM, "metrics registry");
    pthread_mutex_init(&reg->mu, NULL);
    pthread_mutex_init(&reg->render_mu, NULL);
    reg->collector_errors = txo_metrics_register(
        reg, TXO_METRIC_COUNTER, TXO_METRICS_COLLECTOR_ERRORS,
        "Metric collectors that failed during a scrape (their metrics kept older values).", 0, NULL,
        NULL, 0, err);
    if (reg->collector_errors == NULL) {
        txo_metrics_free(reg);
        return TXO_ENOMEM; /* the only way a registration of a valid family fails */
    }
    *out = reg;
    return 0;
}

void txo_metrics_free(struct txo_metrics *reg)
{
    if (reg == NULL)
        return;
    for (size_t i = 0; i < reg->n_families; i++)
        free_family(reg->families[i]);
    txo_free(reg->families);
    txo_free(reg->collectors);
    pthread_mutex_destroy(&reg->render_mu);
    pthread_mutex_destroy(&reg->mu);
    txo_free(reg);
}

int txo_metrics_add_collector(struct txo_metrics *reg, txo_metrics_collect_fn fn, void *arg,
                              struct txo_error *err)
{
    TXO_ASSERT(reg != NULL);
    int rc = 0;

    if (fn == NULL)
        return txo_error_set(err, TXO_EINVAL, "metrics collector function is NULL");
    pthread_mutex_lock(&reg->mu);
    if (TXO_ARRAY_RESERVE(reg->collectors, reg->cap_collectors, reg->n_collectors + 1, 4) < 0) {
        rc = txo_error_set(err, TXO_ENOMEM, "metrics collector");
        goto out;
    }
    reg->collectors[reg->n_collectors++] = (struct collector){.fn = fn, .arg = arg};
out:
    pthread_mutex_unlock(&reg->mu);
    return rc;
}

/* ---- rendering ---- */

static void out_number(struct txo__buf *o, double v)
{
    char num[NUM_MAX];
    format_number(v, num);
    txo__buf_puts(o, num);
}

/* Writes s escaped: \ and newline always, " too when quoted; invalid UTF-8 as U+FFFD. */
static void out_escaped(struct txo__buf *o, const char *s, bool quoted)
{
    const unsigned char *p = (const unsigned char *)s;

    while (*p != '\0') {
        if (*p == '\\') {
            txo__buf_put(o, "\\\\", 2);
            p++;
        } else if (*p == '\n') {
            txo__buf_put(o, "\\n", 2);
            p++;
        } else if (*p == '"' && quoted) {
            txo__buf_put(o, "\\\"", 2);
            p++;
        } else {
            size_t n = txo_utf8_char_len((const char *)p, strnlen((const char *)p, 4));
            if (n == 0) {
                txo__buf_put(o, "\xEF\xBF\xBD", 3);
                p++;
            } else {
                txo__buf_put(o, (const char *)p, n);
                p += n;
            }
        }
    }
}

/* {a="x",b="y"} with le="..." appended when le is not NULL; nothing without any label. */
static void out_labels(struct txo__buf *o, const struct txo_metric *m, const struct child *c,
                       const char *le)
{
    if (m->n_labels == 0 && le == NULL)
        return;
    txo__buf_put(o, "{", 1);
    for (size_t i = 0; i < m->n_labels; i++) {
        if (i > 0)
            txo__buf_put(o, ",", 1);
        txo__buf_puts(o, m->label_names[i]);
        txo__buf_put(o, "=\"", 2);
        out_escaped(o, c->values[i], true);
        txo__buf_put(o, "\"", 1);
    }
    if (le != NULL) {
        txo__buf_puts(o, m->n_labels > 0 ? ",le=\"" : "le=\"");
        txo__buf_puts(o, le);
        txo__buf_put(o, "\"", 1);
    }
    txo__buf_put(o, "}", 1);
}

/* name<suffix>{labels} value\n */
static void out_sample(struct txo__buf *o, const struct txo_metric *m, const char *suffix,
                       const struct child *c, const char *le, double v)
{
    txo__buf_puts(o, m->name);
    txo__buf_puts(o, suffix);
    out_labels(o, m, c, le);
    txo__buf_put(o, " ", 1);
    out_number(o, v);
    txo__buf_put(o, "\n", 1);
}

static int cmp_children(const void *a, const void *b)
{
    const struct child *x = *(const struct child *const *)a;
    const struct child *y = *(const struct child *const *)b;

    for (size_t i = 0; x->values[i] != NULL; i++) {
        int c = strcmp(x->values[i], y->values[i]);
        if (c != 0)
            return c;
    }
    return 0;
}

static void render_child(struct txo__buf *o, const struct txo_metric *m, const struct child *c)
{
    if (m->type != TXO_METRIC_HISTOGRAM) {
        out_sample(o, m, "", c, NULL, c->value);
        return;
    }
    uint64_t cumulative = 0;
    for (size_t i = 0; i < m->n_buckets; i++) {
        cumulative += c->counts[i];
        out_sample(o, m, "_bucket", c, m->le[i], (double)cumulative);
    }
    cumulative += c->counts[m->n_buckets];
    out_sample(o, m, "_bucket", c, "+Inf", (double)cumulative);
    out_sample(o, m, "_sum", c, NULL, c->sum);
    out_sample(o, m, "_count", c, NULL, (double)c->count);
}

static void render_family(struct txo__buf *o, struct txo_metric *m)
{
    txo__buf_puts(o, "# HELP ");
    txo__buf_puts(o, m->name);
    txo__buf_put(o, " ", 1);
    out_escaped(o, m->help, false);
    txo__buf_puts(o, "\n# TYPE ");
    txo__buf_puts(o, m->name);
    txo__buf_put(o, " ", 1);
    txo__buf_puts(o, txo_metric_type_name(m->type));
    txo__buf_put(o, "\n", 1);

    pthread_mutex_lock(&m->mu);
    if (m->n_children > 0) {
        struct child **sorted = txo_malloc(m->n_children * sizeof(*sorted));
        if (sorted == NULL) {
            o->oom = true;
        } else {
            size_t n = 0;
            for (size_t i = 0; i < m->n_slots; i++) {
                for (struct child *c = m->slots[i]; c != NULL; c = c->next)
                    sorted[n++] = c;
            }
            qsort(sorted, n, sizeof(*sorted), cmp_children);
            for (size_t i = 0; i < n; i++)
                render_child(o, m, sorted[i]);
            txo_free(sorted);
        }
    }
    pthread_mutex_unlock(&m->mu);
}

/* Calls every collector; a failure is counted and logged, never returned. */
static void run_collectors(struct txo_metrics *reg, struct txo__buf *o)
{
    pthread_mutex_lock(&reg->mu);
    size_t n = reg->n_collectors;
    struct collector *cs = n > 0 ? txo_malloc(n * sizeof(*cs)) : NULL;
    if (cs != NULL)
        memcpy(cs, reg->collectors, n * sizeof(*cs));
    pthread_mutex_unlock(&reg->mu);
    if (n > 0 && cs == NULL) {
        o->oom = true;
        return;
    }

    for (size_t i = 0; i < n; i++) {
        struct txo_error cerr;
        txo_error_init(&cerr);
        int rc = cs[i].fn(cs[i].arg, reg, &cerr);
        if (rc != 0) {
            txo_metric_inc(reg->collector_errors, NULL);
            TXO_LOG(TXO_LOG_WARN, "metrics", "collector failed, its metrics keep older values",
                    TXO_KV_U64("collector", i), TXO_KV_STR("code", txo_err_name(rc)),
                    TXO_KV_STR("err", cerr.msg[0] != '\0' ? cerr.msg : txo_strerror(rc)));
        }
    }
    txo_free(cs);
}

int txo_metrics_render(struct txo_metrics *reg, char **out, size_t *len, struct txo_error *err)
{
    TXO_ASSERT(reg != NULL && out != NULL);
    struct txo__buf o = {0};
    struct txo_metric **fams = NULL;

    pthread_mutex_lock(&reg->render_mu);
    run_collectors(reg, &o);
    if (o.oom)
        goto out;

    pthread_mutex_lock(&reg->mu);
    size_t n = reg->n_families;
    fams = txo_malloc(n * sizeof(*fams)); /* n >= 1: the collector error counter */
    if (fams != NULL)
        memcpy(fams, reg->families, n * sizeof(*fams));
    pthread_mutex_unlock(&reg->mu);
    if (fams == NULL) {
        o.oom = true;
        goto out;
    }
    for (size_t i = 0; i < n && !o.oom; i++)
        render_family(&o, fams[i]);

out:
    pthread_mutex_unlock(&reg->render_mu);
    txo_free(fams);
    if (!o.oom && o.data == NULL)
        txo__buf_put(&o, "", 0); /* cannot happen (a family is always there), but NUL-terminate */
    if (o.oom) {
        txo_free(o.data);
        return txo_error_set(err, TXO_ENOMEM, "rendering metrics");
    }
    *out = o.data;
    if (len != NULL)
        *len = o.len;
    return 0;
}

struct txo_metric *txo_metrics_register_chained(struct txo_metrics *reg, enum txo_metric_type type,
                                                const char *name, const char *help, size_t n_labels,
                                                const char *const *label_names, int *rc,
                                                struct txo_error *err)
{
    if (reg == NULL || *rc < 0)
        return NULL;
    struct txo_metric *m =
        txo_metrics_register(reg, type, name, help, n_labels, label_names, NULL, 0, err);
    if (m == NULL)
        *rc = err != NULL && err->code != 0 ? err->code : TXO_EINVAL;
    return m;
}

struct txo_metric *txo__metrics_register_event_delay(struct txo_metrics *reg, const char *name,
                                                     const char *help, int *rc,
                                                     struct txo_error *err)
{
    static const double buckets[] = {.001, .0025, .005, .01, .025, .05, .1, .25,
                                     .5,   1,     2.5,  5,   10,   30,  60};
    static const char *const by_type[] = {"aggregate_type"};
    if (reg == NULL || *rc < 0)
        return NULL;
    struct txo_metric *m = txo_metrics_register(reg, TXO_METRIC_HISTOGRAM, name, help, 1, by_type,
                                                buckets, TXO_ARRAY_LEN(buckets), err);
    if (m == NULL)
        *rc = err != NULL && err->code != 0 ? err->code : TXO_ENOMEM;
    return m;
}

int txo_metrics_register_table(struct txo_metrics *reg, const struct txo_metric_desc *desc,
                               size_t n, struct txo_metric **fam, struct txo_error *err)
{
    for (size_t i = 0; i < n; i++) {
        struct txo_metric *m = txo_metrics_register(reg, desc[i].type, desc[i].name, desc[i].help,
                                                    desc[i].n_labels, desc[i].labels, NULL, 0, err);
        if (m == NULL)
            return err != NULL && err->code != 0 ? err->code : TXO_ENOMEM;
        if (fam != NULL)
            fam[i] = m;
    }
    return 0;
}
