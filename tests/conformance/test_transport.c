/*
 * The transport conformance suite: one set of contracts, checked for every transport the build
 * has, each row of the table in transports.c being one transport. `test_transport <name>` runs
 * the contracts of one row (CTest: conformance_<name>, one test per transport built in).
 *
 * A row says how to start the transport's private server (tests/support/test<name>.c), how to
 * make its publisher and consumer for a namespace (a fresh set of stream, topic, queue and
 * group names per contract, so the contracts share one server), and how to read back what
 * reached the server with a client that is not ours: cnats directly (NATS), kcat (Kafka),
 * redis-cli (Redis), pika (RabbitMQ, tests/support/rabbit_client.py), the Python EventSink
 * server's records (gRPC), Python's http.server (webhook, tests/support/http_recorder.py).
 * A read-back is normalised to one JSON object per message: {"key": the idempotency key as
 * the transport carries it, "body": what the server stored, "headers": {"ce-id": ...}}.
 *
 * The contracts, for every row whose flags name them:
 *   publish      the relay drains 32 events of 4 aggregates: exactly 32 messages reached the
 *                server, each key once, each body the event's envelope (or payload), and each
 *                aggregate's events in their order;
 *   cloudevents  in CloudEvents binary mode the attributes travel as headers (ce-specversion,
 *                ce-id = the key, ce-type, ce-source) and the body is the payload; the
 *                consumer decodes them back;
 *   consume      through a handler that records each event in the transactional inbox: an
 *                acknowledged message never comes back (also not to a new consumer on the same
 *                group), a transient error brings it back (delivery 2), a permanent one never
 *                (dead-lettered where the transport keeps dead letters), and a delivery whose
 *                acknowledgement was lost comes again and is dropped by the inbox;
 *   restart      the server is killed while events are pending and started again: the relay
 *                publishes every event, none lost, and a consumer made before the kill
 *                applies each exactly once;
 *   trace        events appended with a W3C trace context (traceparent and tracestate, or a
 *                traceparent alone) and without one: each message carries exactly its
 *                event's traceparent and tracestate headers (Redis: fields; gRPC: the
 *                event's fields; the envelope's members too), one without a context none,
 *                in the txo envelope and in CloudEvents binary mode; the consumer decodes
 *                the same trace (trace id, parent span id, flags, state) into txo_event.trace
 *                and no trace for the others.
 * Adding a transport is one row.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "testdb.h"
#include "testrelay.h"
#include "transports.h"
#include "txo/inbox.h"
#include "txo/outbox.h"

#define N_AGGS     4
#define PER_AGG    8
#define N_EVENTS   (N_AGGS * PER_AGG)
#define NS_MAX     32
#define WAIT_MS    30000
#define CE_SOURCE  "urn:conformance"
#define EVENT_TYPE "OrderCreated"
#define N_TRACED   6 /* events of the trace contract: two of each trace_kind() */

static struct env env;
static const struct row *row;
static unsigned ns_seq;

/* ---- the events and the relay ---- */

/* A contract's namespace and database. */
struct fixture {
    char ns[NS_MAX];
    struct testdb t;
};

static void fixture_init(struct fixture *f, const char *what)
{
    snprintf(f->ns, sizeof(f->ns), "%s%u", what, ++ns_seq);
    char tag[64];
    snprintf(tag, sizeof(tag), "conf_%s_%s", row->name, what);
    testdb_setup(&f->t, tag);
    if (row->prepare != NULL)
        row->prepare(&env, f->ns);
}

static void fixture_release(struct fixture *f)
{
    testdb_teardown(&f->t);
}

struct append_args {
    const char *ns;
    unsigned from, to;
    bool traced; /* with trace_of(i)'s context */
};

/* ---- the trace context of event i ---- */

enum trace_kind {
    TRACE_FULL,   /* a traceparent (sampled) and a tracestate */
    TRACE_PARENT, /* a traceparent (not sampled), no tracestate */
    TRACE_NONE,
};

#define TRACE_STATE "vendor=x"

static enum trace_kind trace_kind(unsigned i)
{
    return (enum trace_kind)(i % 3);
}

/* Event i's traceparent into tp (TXO_TRACEPARENT_LEN + 1 bytes): its own parent span id, so
 * that a context sent with another event shows; NULL for TRACE_NONE. */
static const char *trace_parent_of(unsigned i, char *tp)
{
    if (trace_kind(i) == TRACE_NONE)
        return NULL;
    snprintf(tp, TXO_TRACEPARENT_LEN + 1, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba9%04x-%s",
             i & 0xffffu, trace_kind(i) == TRACE_FULL ? "01" : "00");
    return tp;
}

static const char *trace_state_of(unsigned i)
{
    return trace_kind(i) == TRACE_FULL ? TRACE_STATE : NULL;
}

/* Event i: aggregate "a<i % N_AGGS>", its (i / N_AGGS + 1)th, key "<ns>:<i>". */
static int append_events(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    const struct append_args *a = arg;
    for (unsigned i = a->from; i < a->to; i++) {
        char key[64], agg[16], payload[96];
        snprintf(key, sizeof(key), "%s:%u", a->ns, i);
        snprintf(agg, sizeof(agg), "a%u", i % N_AGGS);
        snprintf(payload, sizeof(payload), "{\"i\":%u,\"agg\":%u,\"seq\":%u}", i, i % N_AGGS,
                 i / N_AGGS + 1);
        struct txo_outbox_event ev = {
            .aggregate_type = "order",
            .aggregate_id = agg,
            .event_type = EVENT_TYPE,
            .payload_json = payload,
            .idempotency_key = key,
        };
        char tp[TXO_TRACEPARENT_LEN + 1];
        struct txo_trace_ctx ctx;
        if (a->traced && trace_parent_of(i, tp) != NULL) {
            assert_true(txo_trace_parse(tp, trace_state_of(i), &ctx));
            ev.trace = &ctx;
        }
        int rc = txo_outbox_append(tx, &ev, 0, NULL, NULL, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void append(struct fixture *f, unsigned from, unsigned to, bool traced)
{
    struct append_args a = {f->ns, from, to, traced};
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_transact(f->t.db, TXO_ISO_READ_COMMITTED, append_events, &a, &err) < 0)
        fail_msg("appending events: %s", err.msg);
}

static int64_t published(struct fixture *f)
{
    return testdb_i64(f->t.db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'",
                      NULL, 0);
}

static struct txo_relay *new_relay(struct fixture *f, struct txo_publisher *pub)
{
    struct txo_relay_opts ro;
    txo_relay_opts_init(&ro);
    ro.relay_id = "conformance";
    ro.batch_size = 5; /* several batches, each aggregate spread over them */
    ro.max_attempts = 1000;
    ro.backoff.base_ms = 50;
    ro.backoff.max_ms = 200;
    ro.backoff.jitter = 0.0;
    return testrelay_new(f->t.db, pub, &ro);
}

/* Runs the relay until want rows are PUBLISHED. */
static void relay_until(struct fixture *f, struct txo_relay *relay, int64_t want)
{
    int64_t deadline = txo_monotonic_ms() + 2 * WAIT_MS;
    while (published(f) < want && txo_monotonic_ms() < deadline) {
        if (testrelay_run_once(relay) == 0)
            txo_sleep_ms(50);
    }
    if (published(f) != want)
        fail_msg("%s: %lld events published, want %lld", row->name, (long long)published(f),
                 (long long)want);
}

/* ---- checks on what the server holds ---- */

/* i of key "<ns>:<i>", or -1. */
static long key_index(const char *ns, const char *key)
{
    size_t len = strlen(ns);
    if (key == NULL || strncmp(key, ns, len) != 0 || key[len] != ':')
        return -1;
    char *end = NULL;
    long i = strtol(key + len + 1, &end, 10);
    return *end == '\0' && i >= 0 && i < N_EVENTS ? i : -1;
}

/* The event's payload in a body: the envelope's "payload", or the body itself. */
static json_t *body_payload(json_t *body)
{
    json_t *p = json_object_get(body, "payload");
    return json_is_object(p) ? p : body;
}

/*
 * Checks the messages the server holds for events [0, n): each key once (exact) or at least
 * once, each body the event's, and (exact) each aggregate's events in their order.
 */
static void check_read_back(const char *ns, json_t *all, unsigned n, bool exact)
{
    unsigned count[N_EVENTS] = {0};
    unsigned last_seq[N_AGGS] = {0};
    size_t k;
    json_t *m;
    json_array_foreach(all, k, m)
    {
        const char *key = json_string_value(json_object_get(m, "key"));
        long i = key_index(ns, key);
        if (i < 0 || (unsigned)i >= n)
            fail_msg("%s: message %zu carries key \"%s\", not one of the events", row->name, k,
                     key != NULL ? key : "(none)");
        count[i]++;
        const char *text = json_string_value(json_object_get(m, "body"));
        json_t *body = json_loads(text, 0, NULL);
        if (body == NULL)
            fail_msg("%s: the body of %s is not JSON: %s", row->name, key, text);
        json_t *env_key = json_object_get(body, "idempotency_key");
        if (env_key != NULL && !json_equal(env_key, json_object_get(m, "key")))
            fail_msg("%s: the envelope of %s names key %s", row->name, key,
                     json_string_value(env_key));
        json_t *p = body_payload(body);
        if (json_integer_value(json_object_get(p, "i")) != i)
            fail_msg("%s: the body of %s is not its event: %s", row->name, key, text);
        unsigned agg = (unsigned)json_integer_value(json_object_get(p, "agg"));
        unsigned seq = (unsigned)json_integer_value(json_object_get(p, "seq"));
        assert_true(agg < N_AGGS);
        if (exact && seq <= last_seq[agg])
            fail_msg("%s: aggregate a%u: event %u after event %u", row->name, agg, seq,
                     last_seq[agg]);
        last_seq[agg] = seq;
        json_decref(body);
    }
    for (unsigned i = 0; i < n; i++) {
        if (count[i] == 0 || (exact && count[i] != 1))
            fail_msg("%s: event %s:%u reached the server %u times", row->name, ns, i, count[i]);
    }
    if (exact)
        assert_int_equal(json_array_size(all), n);
}

/* ---- the consuming handler: the transactional inbox ---- */

struct sink {
    struct txo_db *db; /* NULL: record deliveries only */
    const char *ns;
    long transient, permanent, ack_lost; /* event indexes, -1: none */
    unsigned deliveries[N_EVENTS];       /* distinct deliveries (delivery numbers) of event i */
    uint64_t seen[N_EVENTS];             /* bit d: delivery number d (63: 63 or more) was seen */
    uint64_t last_delivery[N_EVENTS];
    unsigned applied[N_EVENTS];
    unsigned duplicates, strangers;
    unsigned decoded;      /* messages txo_envelope_decode_message() read as their event */
    bool traced[N_EVENTS]; /* the last decoding of event i had a trace context: trace[i] */
    struct txo_trace_ctx trace[N_EVENTS];
};

static void sink_init(struct sink *s, struct txo_db *db, const char *ns)
{
    memset(s, 0, sizeof(*s));
    s->db = db;
    s->ns = ns;
    s->transient = s->permanent = s->ack_lost = -1;
}

struct inbox_args {
    const char *key;
    const char *payload;
    bool duplicate;
};

static int record_in_inbox(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct inbox_args *a = arg;
    return txo_inbox_record(tx, a->key, EVENT_TYPE, a->payload, &a->duplicate, err);
}

static int handle_one(void *arg, const struct txo_inbound_message *msg, struct txo_error *err)
{
    struct sink *s = arg;
    long i = key_index(s->ns, msg->msg_id);
    if (i < 0) {
        s->strangers++;
        return txo_error_set(err, TXO_EINVAL, "not an event of this test");
    }
    uint64_t bit = UINT64_C(1) << (msg->delivery < 63 ? msg->delivery : 63);
    /* A delivery number seen before, from a server that may repeat one: not a new delivery. */
    bool repeat = (s->seen[i] & bit) != 0 && row->repeats_deliveries;
    s->seen[i] |= bit;
    if (repeat) {
        print_message("%s: the server handed out delivery %llu of event %ld again\n", row->name,
                      (unsigned long long)msg->delivery, i);
    } else {
        s->deliveries[i]++;
    }
    if (msg->delivery > s->last_delivery[i])
        s->last_delivery[i] = msg->delivery;
    struct txo_event ev;
    if (txo_envelope_decode_message(msg, &ev, NULL) == 0) {
        if (ev.type != NULL && strcmp(ev.type, EVENT_TYPE) == 0 &&
            strcmp(ev.idempotency_key, msg->msg_id) == 0)
            s->decoded++;
        s->traced[i] = ev.has_trace;
        if (ev.has_trace)
            s->trace[i] = ev.trace;
        txo_event_release(&ev);
    }
    if (i == s->permanent)
        return txo_error_set(err, TXO_EINVAL, "rejected by the test");
    if (i == s->transient && s->deliveries[i] == 1)
        return txo_error_set(err, TXO_EUNAVAILABLE, "the test's database is down");
    if (s->db == NULL)
        return 0;
    struct inbox_args a = {msg->msg_id, msg->data, false};
    int rc = txo_db_transact(s->db, TXO_ISO_READ_COMMITTED, record_in_inbox, &a, err);
    if (rc < 0)
        return rc;
    if (!a.duplicate)
        s->applied[i]++;
    else if (!repeat)
        s->duplicates++;
    if (i == s->ack_lost && s->deliveries[i] == 1) /* committed, then the ack never arrives */
        return txo_error_set(err, TXO_EUNAVAILABLE, "acknowledgement lost");
    return 0;
}

static int handle_batch(void *arg, const struct txo_inbound_message *msgs, size_t n, int *results,
                        struct txo_error *errors)
{
    for (size_t i = 0; i < n; i++)
        results[i] = handle_one(arg, &msgs[i], &errors[i]);
    return 0;
}

/* The events of s not applied (the permanent one aside), as ranges of indexes "0-9 42", or
 * "none". */
static void not_applied(const struct sink *s, char *out, size_t cap)
{
    size_t n = 0;
    snprintf(out, cap, "none");
    for (long i = 0; i < N_EVENTS && n + 24 < cap; i++) {
        if (i == s->permanent || s->applied[i] > 0)
            continue;
        long j = i;
        while (j + 1 < N_EVENTS && j + 1 != s->permanent && s->applied[j + 1] == 0)
            j++;
        int w = j > i ? snprintf(out + n, cap - n, "%s%ld-%ld", n > 0 ? " " : "", i, j)
                      : snprintf(out + n, cap - n, "%s%ld", n > 0 ? " " : "", i);
        n += (size_t)w;
        i = j;
    }
}

/* Polls until done(s) or WAIT_MS; for_ms > 0: polls exactly that long. */
static void poll_until(struct txo_consumer *c, struct sink *s, bool (*done)(const struct sink *),
                       int64_t for_ms)
{
    int64_t wait_ms = for_ms > 0 ? for_ms : WAIT_MS;
    int64_t deadline = txo_monotonic_ms() + wait_ms;
    char last_error[TXO_ERROR_MSG_MAX] = "none";
    while (txo_monotonic_ms() < deadline && (done == NULL || !done(s))) {
        size_t handled = 0;
        struct txo_error err;
        txo_error_init(&err);
        if (txo_consumer_poll(c, 20, 100, &handled, &err) < 0) {
            snprintf(last_error, sizeof(last_error), "%s", err.msg);
            txo_sleep_ms(50);
        }
    }
    if (done != NULL && !done(s)) {
        long applied = 0;
        for (long i = 0; i < N_EVENTS; i++)
            applied += s->applied[i] > 0;
        char missing[512];
        not_applied(s, missing, sizeof(missing));
        if (row->describe != NULL)
            row->describe(&env, s->ns);
        fail_msg("%s: the consumer did not get every event within %lld ms (%ld of %d applied, "
                 "%u duplicates, %u strangers; not applied: %s; the last failed poll: %s)",
                 row->name, (long long)wait_ms, applied, N_EVENTS, s->duplicates, s->strangers,
                 missing, last_error);
    }
}

static bool all_applied(const struct sink *s)
{
    for (long i = 0; i < N_EVENTS; i++) {
        if (i != s->permanent && s->applied[i] == 0)
            return false;
    }
    return (s->transient < 0 || s->deliveries[s->transient] >= 2) &&
           (s->ack_lost < 0 || s->deliveries[s->ack_lost] >= 2) &&
           (s->permanent < 0 || s->deliveries[s->permanent] >= 1);
}

static bool first_half_applied(const struct sink *s)
{
    for (long i = 0; i < N_EVENTS / 2; i++) {
        if (s->applied[i] == 0)
            return false;
    }
    return true;
}

static bool all_decoded(const struct sink *s)
{
    return s->decoded >= 4;
}

/* A consumer of ns, polled once so that it exists on the server before anything is sent. */
static struct txo_consumer *consumer_ready(const char *ns, const struct txo_handler *h)
{
    struct txo_consumer *c = row->consumer(&env, ns, h);
    size_t handled = 0;
    if (txo_consumer_poll(c, 1, 50, &handled, NULL) < 0)
        txo_sleep_ms(50); /* not reachable yet: it declares on a later poll */
    return c;
}

/* ---- the contracts ---- */

static void test_publish(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "pub");
    struct txo_publisher *pub = row->publisher(&env, f.ns);
    struct txo_relay *relay = new_relay(&f, pub);
    append(&f, 0, N_EVENTS, false);
    relay_until(&f, relay, N_EVENTS);
    json_t *all = row->read_back(&env, f.ns);
    check_read_back(f.ns, all, N_EVENTS, true);
    json_decref(all);
    txo_relay_free(relay);
    txo_publisher_free(pub);
    fixture_release(&f);
}

/*
 * One relayed batch in envelope format fmt: a fixture, a sink fed by the row's consumer (when it
 * has one), n events appended (traced: with trace_of(i)'s context) and relayed, and in `all`
 * what reached the server, read with the row's own client.
 */
struct relayed {
    struct fixture f;
    struct sink s;
    struct txo_consumer *c;
    struct txo_publisher *pub;
    struct txo_relay *relay;
    json_t *all;
};

static void relayed_start(struct relayed *r, enum txo_envelope_format fmt, const char *what,
                          unsigned n, bool traced)
{
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_envelope_set_default(fmt, CE_SOURCE, &err), 0);
    fixture_init(&r->f, what);
    sink_init(&r->s, NULL, r->f.ns);
    r->c = row->consumer != NULL
               ? consumer_ready(r->f.ns, &(struct txo_handler){.one = handle_one, .arg = &r->s})
               : NULL;
    r->pub = row->publisher(&env, r->f.ns);
    r->relay = new_relay(&r->f, r->pub);
    append(&r->f, 0, n, traced);
    relay_until(&r->f, r->relay, n);
    r->all = row->read_back(&env, r->f.ns);
    check_read_back(r->f.ns, r->all, n, true);
}

static void relayed_release(struct relayed *r)
{
    json_decref(r->all);
    txo_consumer_free(r->c);
    txo_relay_free(r->relay);
    txo_publisher_free(r->pub);
    fixture_release(&r->f);
}

static void test_cloudevents_binary(void **state)
{
    (void)state;
    struct relayed r;
    relayed_start(&r, TXO_ENVELOPE_CLOUDEVENTS_BINARY, "ce", 4, false);
    size_t k;
    json_t *m;
    json_array_foreach(r.all, k, m)
    {
        json_t *h = json_object_get(m, "headers");
        const char *want[][2] = {
            {"ce-specversion", "1.0"},
            {"ce-id", json_string_value(json_object_get(m, "key"))},
            {"ce-type", EVENT_TYPE},
            {"ce-source", CE_SOURCE},
        };
        for (size_t w = 0; w < TXO_ARRAY_LEN(want); w++) {
            const char *got = json_string_value(json_object_get(h, want[w][0]));
            if (got == NULL || strcmp(got, want[w][1]) != 0)
                fail_msg("%s: header %s is \"%s\", want \"%s\"", row->name, want[w][0],
                         got != NULL ? got : "(none)", want[w][1]);
        }
        /* Binary mode: the body is the payload itself, not an envelope. */
        json_t *body = json_loads(json_string_value(json_object_get(m, "body")), 0, NULL);
        assert_non_null(body);
        assert_null(json_object_get(body, "payload"));
        json_decref(body);
    }
    if (r.c != NULL) {
        poll_until(r.c, &r.s, all_decoded, 0);
        assert_int_equal(r.s.decoded, 4);
    }
    relayed_release(&r);
}

/* name of obj (what: "header", "envelope member") is want, or absent when want is NULL. */
static void check_member(json_t *obj, const char *name, const char *want, const char *key,
                         const char *what)
{
    json_t *v = json_object_get(obj, name);
    const char *got = json_string_value(v);
    if (want == NULL && v != NULL)
        fail_msg("%s: %s carries %s %s \"%s\", want none", row->name, key, what, name,
                 got != NULL ? got : "(not a string)");
    if (want != NULL && (got == NULL || strcmp(got, want) != 0))
        fail_msg("%s: %s carries %s %s \"%s\", want \"%s\"", row->name, key, what, name,
                 got != NULL ? got : "(none)", want);
}

static bool trace_decoded(const struct sink *s)
{
    return s->decoded >= N_TRACED;
}

/* The trace contract in envelope format fmt (see the top); what names its namespace. */
static void check_trace(enum txo_envelope_format fmt, const char *what)
{
    struct relayed r;
    relayed_start(&r, fmt, what, N_TRACED, true);
    size_t k;
    json_t *m;
    json_array_foreach(r.all, k, m)
    {
        const char *key = json_string_value(json_object_get(m, "key"));
        unsigned i = (unsigned)key_index(r.f.ns, key);
        char tp[TXO_TRACEPARENT_LEN + 1];
        const char *want_parent = trace_parent_of(i, tp);
        json_t *h = json_object_get(m, "headers");
        check_member(h, "traceparent", want_parent, key, "header");
        check_member(h, "tracestate", trace_state_of(i), key, "header");
        json_t *body = json_loads(json_string_value(json_object_get(m, "body")), 0, NULL);
        if (body_payload(body) != body) { /* an envelope */
            check_member(body, "traceparent", want_parent, key, "envelope member");
            check_member(body, "tracestate", trace_state_of(i), key, "envelope member");
        }
        json_decref(body);
    }
    if (r.c != NULL) {
        poll_until(r.c, &r.s, trace_decoded, 0);
        for (unsigned i = 0; i < N_TRACED; i++) {
            char tp[TXO_TRACEPARENT_LEN + 1], got[TXO_TRACEPARENT_LEN + 1];
            const char *want_parent = trace_parent_of(i, tp);
            if (r.s.traced[i] != (want_parent != NULL))
                fail_msg("%s: the consumer decoded event %u %s a trace context", row->name, i,
                         r.s.traced[i] ? "with" : "without");
            if (!r.s.traced[i])
                continue;
            txo_trace_format(&r.s.trace[i], got); /* version, trace id, parent span id, flags */
            assert_string_equal(got, want_parent);
            assert_string_equal(r.s.trace[i].state,
                                trace_state_of(i) != NULL ? trace_state_of(i) : "");
        }
    }
    relayed_release(&r);
}

static void test_trace(void **state)
{
    (void)state;
    check_trace(TXO_ENVELOPE_TXO, "trc");
}

static void test_trace_cloudevents_binary(void **state)
{
    (void)state;
    check_trace(TXO_ENVELOPE_CLOUDEVENTS_BINARY, "trcce");
}

static int reset_envelope(void **state)
{
    (void)state;
    return txo_envelope_set_default(TXO_ENVELOPE_TXO, NULL, NULL);
}

static void test_consume(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "con");
    struct txo_db *db = testdb_connect(&f.t);
    struct sink s;
    sink_init(&s, db, f.ns);
    s.transient = 5;
    s.permanent = 6;
    s.ack_lost = 9;
    struct txo_consumer *c =
        consumer_ready(f.ns, &(struct txo_handler){.one = handle_one, .arg = &s});
    struct txo_publisher *pub = row->publisher(&env, f.ns);
    struct txo_relay *relay = new_relay(&f, pub);
    append(&f, 0, N_EVENTS, false);
    relay_until(&f, relay, N_EVENTS);

    poll_until(c, &s, all_applied, 0);
    poll_until(c, &s, NULL, 2500); /* past every redelivery delay: nothing more comes */
    for (long i = 0; i < N_EVENTS; i++) {
        unsigned want_deliveries = i == s.transient || i == s.ack_lost ? 2 : 1;
        if (s.deliveries[i] != want_deliveries)
            fail_msg("%s: event %ld delivered %u times, want %u", row->name, i, s.deliveries[i],
                     want_deliveries);
        assert_int_equal(s.applied[i], i == s.permanent ? 0 : 1);
    }
    if (row->repeats_deliveries) /* its second delivery may be lost to the repeat */
        assert_true(s.last_delivery[s.transient] >= 2);
    else
        assert_int_equal(s.last_delivery[s.transient], 2);
    assert_int_equal(s.duplicates, 1); /* the delivery whose ack was lost */
    assert_int_equal(s.strangers, 0);
    assert_int_equal(testdb_i64(db, "SELECT COUNT(*) FROM inbox_events", NULL, 0), N_EVENTS - 1);
    if (row->dead_letters != NULL) {
        int64_t deadline = txo_monotonic_ms() + 5000;
        while (row->dead_letters(&env, f.ns) < 1 && txo_monotonic_ms() < deadline)
            txo_sleep_ms(100);
        assert_int_equal(row->dead_letters(&env, f.ns), 1);
    }

    /* Everything was settled: a new consumer on the same group gets nothing. */
    txo_consumer_free(c);
    struct sink again;
    sink_init(&again, NULL, f.ns);
    c = row->consumer(&env, f.ns, &(struct txo_handler){.batch = handle_batch, .arg = &again});
    poll_until(c, &again, NULL, 2000);
    for (long i = 0; i < N_EVENTS; i++) {
        if (again.deliveries[i] != 0)
            fail_msg("%s: event %ld delivered again after it was settled", row->name, i);
    }
    txo_consumer_free(c);
    txo_relay_free(relay);
    txo_publisher_free(pub);
    txo_db_close(db);
    fixture_release(&f);
}

static void test_restart(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "rst");
    struct txo_db *db = testdb_connect(&f.t);
    struct sink s;
    sink_init(&s, db, f.ns);
    struct txo_consumer *c = NULL;
    if (row->consumer != NULL)
        c = consumer_ready(f.ns, &(struct txo_handler){.batch = handle_batch, .arg = &s});
    struct txo_publisher *pub = row->publisher(&env, f.ns);
    struct txo_relay *relay = new_relay(&f, pub);
    append(&f, 0, N_EVENTS / 2, false);
    relay_until(&f, relay, N_EVENTS / 2);

    /* Down: nothing is published, nothing is lost. */
    row->kill(&env);
    append(&f, N_EVENTS / 2, N_EVENTS, false);
    (void)testrelay_run_once(relay);
    assert_int_equal(published(&f), N_EVENTS / 2);
    size_t handled = 0;
    if (c != NULL && txo_consumer_poll(c, 20, 100, &handled, NULL) == 0)
        assert_int_equal(handled, 0);

    row->restart(&env);
    relay_until(&f, relay, N_EVENTS);
    json_t *all = row->read_back(&env, f.ns);
    check_read_back(f.ns, all, N_EVENTS, false);
    json_decref(all);
    if (c != NULL) {
        poll_until(c, &s, all_applied, 2 * WAIT_MS);
        poll_until(c, &s, NULL, 1000);
        for (long i = 0; i < N_EVENTS; i++)
            assert_int_equal(s.applied[i], 1); /* a redelivery is dropped by the inbox */
        txo_consumer_free(c);
    }
    txo_relay_free(relay);
    txo_publisher_free(pub);
    txo_db_close(db);
    fixture_release(&f);
}

/*
 * The server forgets the consumer (its queue, group or durable is deleted, as an operator or a
 * crash of the server's side would): the consumer is told, a poll fails instead of waiting on
 * a subscription that will never deliver again, and the next one creates its side anew.
 * What is published from then on reaches it, each event applied once (a redelivery of what
 * it had already applied is dropped by the inbox).
 */
static void test_forgotten(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "fgt");
    struct txo_db *db = testdb_connect(&f.t);
    struct sink s;
    sink_init(&s, db, f.ns);
    struct txo_consumer *c =
        consumer_ready(f.ns, &(struct txo_handler){.batch = handle_batch, .arg = &s});
    struct txo_publisher *pub = row->publisher(&env, f.ns);
    struct txo_relay *relay = new_relay(&f, pub);
    append(&f, 0, N_EVENTS / 2, false);
    relay_until(&f, relay, N_EVENTS / 2);
    poll_until(c, &s, first_half_applied, 0);

    row->forget(&env, f.ns);
    int64_t deadline = txo_monotonic_ms() + WAIT_MS;
    struct txo_error err;
    txo_error_init(&err);
    size_t handled = 0;
    while (txo_consumer_poll(c, 20, 200, &handled, &err) == 0) {
        if (txo_monotonic_ms() > deadline)
            fail_msg("%s: the server forgot the consumer, and after %d ms of polls it had not "
                     "been told",
                     row->name, WAIT_MS);
    }
    print_message("%s: told: %s\n", row->name, err.msg);
    /* Created anew by a poll that succeeds, before anything more is published (a queue that
     * does not exist yet would not get it). */
    deadline = txo_monotonic_ms() + WAIT_MS;
    for (;;) {
        txo_error_init(&err);
        if (txo_consumer_poll(c, 20, 200, &handled, &err) == 0)
            break;
        if (txo_monotonic_ms() > deadline)
            fail_msg("%s: the consumer did not come back after the server forgot it: %s", row->name,
                     err.msg);
        txo_sleep_ms(50);
    }

    append(&f, N_EVENTS / 2, N_EVENTS, false);
    relay_until(&f, relay, N_EVENTS);
    poll_until(c, &s, all_applied, 0);
    for (long i = 0; i < N_EVENTS; i++)
        assert_int_equal(s.applied[i], 1);
    assert_int_equal(s.strangers, 0);
    txo_consumer_free(c);
    txo_relay_free(relay);
    txo_publisher_free(pub);
    txo_db_close(db);
    fixture_release(&f);
}

/* ---- the run ---- */

static int start_server(void **state)
{
    (void)state;
    row->start(&env);
    return 0;
}

static int stop_server(void **state)
{
    (void)state;
    row->cleanup(&env);
    return 0;
}

int main(int argc, char **argv)
{
    for (size_t i = 0; argc == 2 && i < transport_n_rows; i++) {
        if (strcmp(argv[1], transport_rows[i].name) == 0)
            row = &transport_rows[i];
    }
    if (row == NULL) {
        fprintf(stderr, "usage: test_transport TRANSPORT (one of:");
        for (size_t i = 0; i < transport_n_rows; i++)
            fprintf(stderr, " %s", transport_rows[i].name);
        fprintf(stderr, ")\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_publish),
        cmocka_unit_test_teardown(test_cloudevents_binary, reset_envelope),
        cmocka_unit_test(test_consume),
        cmocka_unit_test(test_restart),
        cmocka_unit_test_teardown(test_trace, reset_envelope),
        cmocka_unit_test_teardown(test_trace_cloudevents_binary, reset_envelope),
        cmocka_unit_test(test_forgotten),
    };
    /* A test runs when the row has every contract it names. */
    const unsigned flags[] = {C_PUBLISH, C_CLOUDEVENTS,           C_CONSUME, C_RESTART,
                              C_TRACE,   C_TRACE | C_CLOUDEVENTS, C_FORGET};
    struct CMUnitTest chosen[TXO_ARRAY_LEN(all)];
    size_t n = 0;
    for (size_t i = 0; i < TXO_ARRAY_LEN(all); i++) {
        if ((row->contracts & flags[i]) == flags[i])
            chosen[n++] = all[i];
    }
    int failed = _cmocka_run_group_tests(row->name, chosen, n, start_server, stop_server);
    if (row->shutdown != NULL)
        row->shutdown(); /* the SDK's threads, so leak checkers see a clean exit */
    return failed;
}
