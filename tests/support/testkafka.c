/* See testkafka.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <stdatomic.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "testkafka.h"
#include "testrun.h"

#define BROKERS 3

void testkafka_start(struct testkafka *k)
{
    memset(k, 0, sizeof(*k));
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    /* The handle only hosts the cluster: quiet, never used to produce. */
    if (rd_kafka_conf_set(conf, "log_level", "2", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
        fail_msg("mock cluster: %s", errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (rk == NULL)
        fail_msg("mock cluster: rd_kafka_new: %s", errstr);
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, BROKERS);
    if (mc == NULL)
        fail_msg("mock cluster: rd_kafka_mock_cluster_new failed");
    k->rk = rk;
    k->mock = mc;
    snprintf(k->bootstraps, sizeof(k->bootstraps), "%s", rd_kafka_mock_cluster_bootstraps(mc));
}

void testkafka_stop(struct testkafka *k)
{
    if (k->mock != NULL)
        rd_kafka_mock_cluster_destroy(k->mock);
    if (k->rk != NULL)
        rd_kafka_destroy(k->rk);
    k->mock = NULL;
    k->rk = NULL;
}

void *testkafka_mock(const struct testkafka *k)
{
    return k->mock;
}

void testkafka_create_topic(const struct testkafka *k, const char *topic, int partitions)
{
    rd_kafka_resp_err_t e = rd_kafka_mock_topic_create(k->mock, topic, partitions, BROKERS);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        fail_msg("mock cluster: creating topic %s: %s", topic, rd_kafka_err2str(e));
}

static const char *kcat_bin(void)
{
    const char *env = getenv("TXO_KCAT");
    if (env != NULL && env[0] != '\0')
        return env;
    static const char *const paths[] = {"/usr/bin/kcat", "/usr/local/bin/kcat", "/bin/kcat"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        if (access(paths[i], X_OK) == 0)
            return paths[i];
    }
    fail_msg("kcat not found (install the Debian package kcat, or set TXO_KCAT)");
    return NULL;
}

/* Splits line at tabs into at most n fields (the last keeps its tabs). */
static size_t split_tabs(char *line, char **fields, size_t n)
{
    size_t k = 0;
    char *s = line;
    while (k + 1 < n) {
        char *tab = strchr(s, '\t');
        if (tab == NULL)
            break;
        *tab = '\0';
        fields[k++] = s;
        s = tab + 1;
    }
    fields[k++] = s;
    return k;
}

size_t testkafka_read(const struct testkafka *k, const char *topic, struct testkafka_record **out)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "'%s' -b '%s' -C -t '%s' -o beginning -e -q -f '%%p\\t%%o\\t%%k\\t%%h\\t%%s\\n'",
             kcat_bin(), k->bootstraps, topic);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        fail_msg("popen %s failed", cmd);
    struct testkafka_record *recs = NULL;
    size_t n = 0, cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, p)) > 0) {
        if (line[len - 1] == '\n')
            line[--len] = '\0';
        char *f[5] = {NULL}; /* split_tabs() sets only as many as it found */
        if (split_tabs(line, f, 5) != 5)
            fail_msg("kcat printed an unexpected line: %s", line);
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            recs = realloc(recs, cap * sizeof(*recs));
            assert_non_null(recs);
        }
        struct testkafka_record *r = &recs[n++];
        r->partition = (int32_t)strtol(f[0], NULL, 10);
        r->offset = strtoll(f[1], NULL, 10);
        r->key = strdup(f[2]);
        r->headers = strdup(f[3]);
        r->value = strdup(f[4]);
        assert_true(r->key && r->headers && r->value);
    }
    free(line);
    int st = pclose(p);
    if (st != 0)
        fail_msg("%s exited with status %d", cmd, st);
    *out = recs;
    return n;
}

void testkafka_records_free(struct testkafka_record *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(r[i].key);
        free(r[i].headers);
        free(r[i].value);
    }
    free(r);
}

char *testkafka_header(const struct testkafka_record *r, const char *name)
{
    size_t nlen = strlen(name);
    for (const char *s = r->headers; *s != '\0';) {
        size_t len = strcspn(s, ",");
        if (len > nlen && memcmp(s, name, nlen) == 0 && s[nlen] == '=') {
            char *v = strndup(s + nlen + 1, len - nlen - 1);
            assert_non_null(v);
            return v;
        }
        s += len + (s[len] == ',' ? 1 : 0);
    }
    return NULL;
}

void testkafka_produce(const struct testkafka *k, const char *topic, const char *key,
                       const char *value, const char *const *headers)
{
    char cmd[2048];
    int n = snprintf(cmd, sizeof(cmd), "'%s' -b '%s' -P -t '%s' -K '\\t'", kcat_bin(),
                     k->bootstraps, topic);
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++)
        n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " -H '%s'", headers[i]);
    assert_true(n > 0 && (size_t)n < sizeof(cmd));
    FILE *p = popen(cmd, "w");
    if (p == NULL)
        fail_msg("popen %s failed", cmd);
    fprintf(p, "%s\t%s\n", key, value);
    int st = pclose(p);
    if (st != 0)
        fail_msg("%s exited with status %d", cmd, st);
}

void testkafka_set_brokers(const struct testkafka *k, bool up)
{
    for (int32_t id = 1; id <= BROKERS; id++) {
        rd_kafka_resp_err_t e = up ? rd_kafka_mock_broker_set_up(k->mock, id)
                                   : rd_kafka_mock_broker_set_down(k->mock, id);
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
            fail_msg("mock broker %d: %s", (int)id, rd_kafka_err2str(e));
    }
}

void testkafka_fresh(char *out, size_t size, const char *what)
{
    static atomic_uint next_id;
    snprintf(out, size, "%s%u", what, atomic_fetch_add(&next_id, 1));
}

void testkafka_opts(const struct testkafka *k, struct txo_kafka_opts *o, const char *template)
{
    txo_kafka_opts_init(o);
    o->brokers = k->bootstraps;
    o->topic_template = template;
    o->delivery_timeout_ms = 5000;
}

struct txo_publisher *testkafka_publisher(const struct txo_kafka_opts *o)
{
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_kafka_new(o, NULL, &pub, &err) < 0)
        fail_msg("txo_publisher_kafka_new: %s", err.msg);
    return pub;
}

void testkafka_batch_init(struct testbatch *b, size_t n, size_t n_aggs, const char *prefix)
{
    testbatch_init(b, n, 1, prefix);
    for (size_t i = 0; i < n; i++) {
        char payload[64];
        int len = snprintf(payload, sizeof(payload), "{\"n\":%zu,\"big\":9007199254740993}", i);
        snprintf(b->keys[i], sizeof(b->keys[i]), "%s:%zu", prefix, i);
        snprintf(b->aggs[i], sizeof(b->aggs[i]), "%zu", i % n_aggs);
        testbatch_set_payload(b, i, payload, (size_t)len);
    }
}

long testkafka_key_index(const char *key)
{
    const char *colon = key != NULL ? strrchr(key, ':') : NULL;
    return colon != NULL ? strtol(colon + 1, NULL, 10) : -1;
}

TESTRUN_SHARED_SERVER(testkafka, testkafka_start, testkafka_stop)
