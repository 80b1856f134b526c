#include "core/common.h"

/*
 * The gRPC publisher (txo/grpc.h): the relay's batches as EventSink.Publish calls
 * (proto/txo/v1/event_sink.proto), made with gRPC's C core and protobuf-c.
 *
 * One batch, grpc_publish_batch():
 *   1. Each event becomes a txo.v1.Event pointing at the borrowed strings of its message (no
 *      copy; the payload goes as bytes, exactly the stored JSON text). Its trace context
 *      travels in the event's own traceparent and tracestate fields: a call carries the
 *      events of many traces, so its metadata carries none of them.
 *   2. The events are cut into requests of at most max_batch_bytes encoded (usually one for
 *      the whole batch); an event that alone is bigger fails permanently.
 *   3. Each request is one unary call on the publisher's channel, with its own deadline, on
 *      the publisher's completion queue. settle_channel() first lets a channel that is not
 *      ready connect (gRPC advances a connection only while someone polls); then the six ops
 *      of a unary call go in one
 *      grpc_call_start_batch(), then grpc_completion_queue_next() for its single completion.
 *      The deadline makes gRPC complete the call by itself; the wait on the queue allows a
 *      margin after it and cancels the call if even that passes, so a batch cannot hang.
 *   4. The status and the PublishResponse give each event's result (the table in txo/grpc.h).
 *      A call that failed as a whole stops the batch: the later requests are not sent and
 *      their events get the same error.
 *
 * Error messages written to errors[] for a call-level failure are the same for every event
 * of the call, so that the relay marks them with one UPDATE per distinct error.
 *
 * gRPC's process-wide state: grpc_init() at creation, grpc_shutdown() at destruction, after
 * the channel and the queue are gone. gRPC counts the references, so publishers may come and
 * go. The channel holds a reference of its own, which gRPC may drop a moment later on one of
 * its threads; the last grpc_shutdown() then cleans up on a detached thread of gRPC's. So the
 * destruction of the last publisher of the process (live_publishers, under live_mu) waits,
 * up to SHUTDOWN_WAIT_MS, until gRPC reports itself shut down: afterwards no gRPC thread runs
 * (what valgrind and the thread test check). An application that uses gRPC itself keeps it
 * initialised; that wait then ends after SHUTDOWN_WAIT_MS.
 *
 * The channel is plaintext, or TLS with the PEM files of the options (make_credentials());
 * the private key's copy is wiped as soon as gRPC took it.
 *
 * Ownership: the publisher owns its channel, queue, the copy of the target and the per-batch
 * arrays (grown to the largest batch seen). Thread-safety: one relay thread at a time; the
 * metrics families are thread-safe by themselves.
 */

#include <pthread.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "broker/transport.h"
#include "txo/v1/event_sink.pb-c.h"

#define METHOD             "/txo.v1.EventSink/Publish"
#define WAIT_MARGIN_MS     2000 /* after the deadline, before the call is cancelled */
#define MIN_BATCH_BYTES    1024
#define REASON_MAX         200  /* of a server's reason, kept in errors[i] */
#define RECONNECT_FIRST_MS 100  /* wait before the first reconnect attempt */
#define CONNECT_MIN_MS     1000 /* bounds of one connection attempt */
#define CONNECT_MAX_MS     20000
#define SHUTDOWN_WAIT_MS   2000 /* see the top of the file */
#define FAILURE_POLL_MS    50   /* see settle_channel() */
#define RESULT_PENDING     1    /* results[i] while no outcome is known (codes are <= 0) */
#define REQUEST_OVERHEAD   16   /* tag + length prefix of one event inside a request, at most */

/* ---- options ---- */

void txo_grpc_opts_init(struct txo_grpc_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->target = "127.0.0.1:50051";
    o->deadline_ms = 5000;
    o->keepalive_ms = 30000;
    o->keepalive_timeout_ms = 10000;
    o->reconnect_max_ms = 5000;
    o->max_batch_bytes = 4000000;
}

static int check_opts(const struct txo_grpc_opts *o, struct txo_error *err)
{
    if (o == NULL)
        return txo_error_set(err, TXO_EINVAL, "grpc publisher: options are required");
    if (o->target == NULL || o->target[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "grpc publisher: target is empty (host:port)");
    if (o->deadline_ms < 1 || o->keepalive_ms < 1 || o->keepalive_timeout_ms < 1 ||
        o->reconnect_max_ms < 1)
        return txo_error_set(err, TXO_EINVAL,
                             "grpc publisher: deadline_ms, keepalive_ms, keepalive_timeout_ms and "
                             "reconnect_max_ms must be >= 1");
    if (o->deadline_ms > INT32_MAX || o->keepalive_ms > INT32_MAX ||
        o->keepalive_timeout_ms > INT32_MAX || o->reconnect_max_ms > INT32_MAX)
        return txo_error_set(err, TXO_EINVAL,
                             "grpc publisher: durations must be below 2^31 ms (about 24 days)");
    if ((o->cert_file == NULL) != (o->key_file == NULL))
        return txo_error_set(err, TXO_EINVAL,
                             "grpc publisher: a client certificate needs both cert_file and "
                             "key_file");
    if (o->cert_file != NULL && o->ca_file == NULL)
        return txo_error_set(err, TXO_EINVAL,
                             "grpc publisher: a client certificate needs TLS (ca_file)");
    if (o->max_batch_bytes < MIN_BATCH_BYTES || o->max_batch_bytes > INT32_MAX)
        return txo_error_set(err, TXO_EINVAL,
                             "grpc publisher: max_batch_bytes must be between %d and 2^31-1, "
                             "got %zu",
                             MIN_BATCH_BYTES, o->max_batch_bytes);
    return 0;
}

/* ---- status codes ---- */

static const char *const status_names[] = {
    [GRPC_STATUS_OK] = "OK",
    [GRPC_STATUS_CANCELLED] = "CANCELLED",
    [GRPC_STATUS_UNKNOWN] = "UNKNOWN",
    [GRPC_STATUS_INVALID_ARGUMENT] = "INVALID_ARGUMENT",
    [GRPC_STATUS_DEADLINE_EXCEEDED] = "DEADLINE_EXCEEDED",
    [GRPC_STATUS_NOT_FOUND] = "NOT_FOUND",
    [GRPC_STATUS_ALREADY_EXISTS] = "ALREADY_EXISTS",
    [GRPC_STATUS_PERMISSION_DENIED] = "PERMISSION_DENIED",
    [GRPC_STATUS_RESOURCE_EXHAUSTED] = "RESOURCE_EXHAUSTED",
    [GRPC_STATUS_FAILED_PRECONDITION] = "FAILED_PRECONDITION",
    [GRPC_STATUS_ABORTED] = "ABORTED",
    [GRPC_STATUS_OUT_OF_RANGE] = "OUT_OF_RANGE",
    [GRPC_STATUS_UNIMPLEMENTED] = "UNIMPLEMENTED",
    [GRPC_STATUS_INTERNAL] = "INTERNAL",
    [GRPC_STATUS_UNAVAILABLE] = "UNAVAILABLE",
    [GRPC_STATUS_DATA_LOSS] = "DATA_LOSS",
    [GRPC_STATUS_UNAUTHENTICATED] = "UNAUTHENTICATED",
};

static const char *status_name(grpc_status_code s)
{
    size_t i = (size_t)s;
    if (s < 0 || i >= sizeof(status_names) / sizeof(status_names[0]))
        return "UNKNOWN";
    return status_names[i];
}

int txo_grpc_status_code(int grpc_status)
{
    switch ((grpc_status_code)grpc_status) {
    case GRPC_STATUS_OK:
        return 0;
    case GRPC_STATUS_UNAVAILABLE:
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return TXO_EUNAVAILABLE;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return TXO_ETIMEOUT;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_FAILED_PRECONDITION:
    case GRPC_STATUS_OUT_OF_RANGE:
        return TXO_EINVAL;
    case GRPC_STATUS_NOT_FOUND:
    case GRPC_STATUS_UNIMPLEMENTED:
    case GRPC_STATUS_PERMISSION_DENIED:
    case GRPC_STATUS_UNAUTHENTICATED:
        return TXO_ECONFIG;
    default:
        /* CANCELLED, UNKNOWN, ALREADY_EXISTS, ABORTED, INTERNAL, DATA_LOSS and any code of a
         * later gRPC: a failure that may pass. */
        return TXO_EPUBLISH;
    }
}

/* ---- metrics ---- */

struct grpc_metrics {
    struct txo_metric *published; /* counter */
    struct txo_metric *failed;    /* counter {kind} */
    struct txo_metric *calls;     /* counter {status} */
    struct txo_metric *in_flight; /* gauge */
    struct txo_metric *duration;  /* histogram, seconds */
};

static const struct txo_metric_desc families[] = {
    {TXO_METRIC_COUNTER, "txo_grpc_events_published_total", "Events the EventSink server accepted.",
     0, NULL},
    {TXO_METRIC_COUNTER, "txo_grpc_events_failed_total",
     "Events not delivered by a publish attempt, by kind (transient: retried; permanent: "
     "dead-lettered).",
     1, (const char *const[]){"kind"}},
    {TXO_METRIC_COUNTER, "txo_grpc_calls_total", "EventSink.Publish calls made, by gRPC status.", 1,
     (const char *const[]){"status"}},
    {TXO_METRIC_GAUGE, "txo_grpc_calls_in_flight", "EventSink.Publish calls awaiting their answer.",
     0, NULL},
    {TXO_METRIC_HISTOGRAM, "txo_grpc_call_duration_seconds",
     "Time from sending an EventSink.Publish call to its status.", 0, NULL},
};

static int register_metrics(struct grpc_metrics *gm, struct txo_metrics *reg, struct txo_error *err)
{
    struct txo_metric **const slots[] = {&gm->published, &gm->failed, &gm->calls, &gm->in_flight,
                                         &gm->duration};
    return txo__transport_metrics(reg, families, TXO_ARRAY_LEN(families), slots, err);
}

/* ---- the publisher ---- */

struct grpc_publisher {
    char *target;
    int64_t deadline_ms;
    size_t max_batch_bytes;
    grpc_channel *channel;
    grpc_completion_queue *cq;
    struct grpc_metrics metrics;

    /* The current batch, grown to the largest seen. */
    size_t cap;
    Txo__V1__Event *events;
    Txo__V1__Event **event_ptrs;
    size_t *sizes; /* encoded size of event i inside a request */
};

static int grow(struct grpc_publisher *p, size_t n)
{
    if (n <= p->cap)
        return 0;
    if (TXO_ARRAY_RESIZE(p->events, n) < 0 || TXO_ARRAY_RESIZE(p->event_ptrs, n) < 0 ||
        TXO_ARRAY_RESIZE(p->sizes, n) < 0)
        return TXO_ENOMEM;
    p->cap = n;
    return 0;
}

/* protobuf-c's string fields are char *; it only reads them when packing. */
static char *field(const char *s)
{
    return (char *)(uintptr_t)(s != NULL ? s : "");
}

static void fill_event(Txo__V1__Event *e, const struct txo_outbox_message *m)
{
    txo__v1__event__init(e);
    e->id = m->id;
    e->type = field(m->event_type);
    e->aggregate_type = field(m->aggregate_type);
    e->aggregate_id = field(m->aggregate_id);
    e->idempotency_key = field(m->idempotency_key);
    e->created_at = field(m->created_at);
    e->attempt = m->attempt;
    e->sequence = m->sequence;
    e->prev_sequence = m->prev_sequence;
    e->payload.data = (uint8_t *)(uintptr_t)(m->payload != NULL ? m->payload : "");
    e->payload.len = m->payload != NULL ? m->payload_len : 0;
    e->traceparent = field(m->traceparent);
    e->tracestate = field(m->traceparent != NULL ? m->tracestate : NULL);
}

static void fail_range(size_t from, size_t to, int *results, struct txo_error *errors,
                       const struct txo_error *why)
{
    for (size_t i = from; i < to; i++) {
        if (results[i] != RESULT_PENDING)
            continue;
        errors[i] = *why;
        results[i] = why->code;
    }
}

/* What one call came back with. */
struct call_outcome {
    grpc_status_code status;
    char details[TXO_ERROR_MSG_MAX / 2];
    Txo__V1__PublishResponse *response; /* NULL unless OK with a readable body; owned */
    bool body_unreadable;
};

static gpr_timespec ms_from_now(int64_t ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/*
 * Copies len bytes of text from the server into out (cap bytes, NUL-terminated): cut on a
 * character boundary, every byte that is not valid UTF-8 (or is a control character) as '?'.
 * The text ends up in last_error and dead letters, utf8mb4 columns that refuse broken UTF-8.
 */
static void copy_server_text(char *out, size_t cap, const char *s, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = txo_utf8_char_len(s + i, len - i);
        if (n == 0 || (n == 1 && ((unsigned char)s[i] < 0x20 || s[i] == 0x7f))) {
            n = 1;
            if (o + 1 >= cap)
                break;
            out[o++] = '?';
        } else {
            if (o + n >= cap)
                break;
            memcpy(out + o, s + i, n);
            o += n;
        }
        i += n;
    }
    out[o] = '\0';
}

static void copy_slice(char *out, size_t cap, grpc_slice s)
{
    copy_server_text(out, cap, (const char *)GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s));
}

static Txo__V1__PublishResponse *read_response(grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return NULL;
    grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    Txo__V1__PublishResponse *resp =
        txo__v1__publish_response__unpack(NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
    grpc_slice_unref(all);
    return resp;
}

static const char *state_name(grpc_connectivity_state st)
{
    switch (st) {
    case GRPC_CHANNEL_IDLE:
        return "idle";
    case GRPC_CHANNEL_CONNECTING:
        return "connecting";
    case GRPC_CHANNEL_READY:
        return "ready";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
        return "transient failure";
    case GRPC_CHANNEL_SHUTDOWN:
        return "shut down";
    }
    return "unknown";
}

/*
 * Lets the channel settle before a call, until deadline at the latest, and returns its state.
 * gRPC's C core makes progress on a connection attempt only while some thread polls (a
 * completion queue, or its backup poller every 5 s), and a fail-fast call on a channel in
 * transient failure returns at once without polling: without this, a server that came back
 * would be noticed by the backup poller only. So an idle or connecting channel is waited for
 * (while the server is down the attempt is refused within milliseconds; a server that does not
 * answer at all costs the deadline), and a channel in transient failure is polled for up to
 * FAILURE_POLL_MS, which completes a reconnect attempt gRPC started since the last batch.
 */
static grpc_connectivity_state settle_channel(struct grpc_publisher *p, gpr_timespec deadline)
{
    grpc_connectivity_state st = grpc_channel_check_connectivity_state(p->channel, 1);
    while (st != GRPC_CHANNEL_READY && st != GRPC_CHANNEL_SHUTDOWN) {
        gpr_timespec until = deadline;
        if (st == GRPC_CHANNEL_TRANSIENT_FAILURE) {
            gpr_timespec soon = ms_from_now(FAILURE_POLL_MS);
            if (gpr_time_cmp(soon, deadline) < 0)
                until = soon;
        }
        void *tag = &p->cq;
        grpc_channel_watch_connectivity_state(p->channel, st, until, p->cq, tag);
        grpc_event ev =
            grpc_completion_queue_next(p->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        TXO_ASSERT(ev.type == GRPC_OP_COMPLETE && ev.tag == tag);
        st = grpc_channel_check_connectivity_state(p->channel, 0);
        if (!ev.success)
            break; /* no change until then */
    }
    return st;
}

/*
 * Makes one Publish call with the request req (size bytes encoded) and fills *co. Returns 0,
 * or a negative code when the call could not be started (then *co is not filled).
 */
static int call_publish(struct grpc_publisher *p, const Txo__V1__PublishRequest *req, size_t size,
                        struct call_outcome *co, struct txo_error *why)
{
    memset(co, 0, sizeof(*co));
    gpr_timespec deadline = ms_from_now(p->deadline_ms);
    grpc_connectivity_state st = settle_channel(p, deadline);
    if (st != GRPC_CHANNEL_READY && st != GRPC_CHANNEL_TRANSIENT_FAILURE) {
        /* Still connecting at the deadline: nothing was sent. */
        return txo_error_set(why, TXO_EUNAVAILABLE,
                             "grpc publisher: %s: UNAVAILABLE: not connected within %" PRId64
                             " ms (channel %s)",
                             p->target, p->deadline_ms, state_name(st));
    }
    grpc_slice body = grpc_slice_malloc(size);
    txo__v1__publish_request__pack(req, GRPC_SLICE_START_PTR(body));
    grpc_byte_buffer *send_bb = grpc_raw_byte_buffer_create(&body, 1);
    grpc_slice_unref(body);

    /* In transient failure the call fails at once with gRPC's reason (UNAVAILABLE). */
    grpc_slice method = grpc_slice_from_static_string(METHOD);
    grpc_call *call = grpc_channel_create_call(p->channel, NULL, GRPC_PROPAGATE_DEFAULTS, p->cq,
                                               method, NULL, deadline, NULL);
    if (call == NULL) {
        grpc_byte_buffer_destroy(send_bb);
        return txo_error_set(why, TXO_EPUBLISH, "grpc publisher: %s: cannot create a call",
                             p->target);
    }

    grpc_metadata_array initial_md, trailing_md;
    grpc_metadata_array_init(&initial_md);
    grpc_metadata_array_init(&trailing_md);
    grpc_byte_buffer *recv_bb = NULL;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;

    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv_bb;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing_md;
    ops[5].data.recv_status_on_client.status = &co->status;
    ops[5].data.recv_status_on_client.status_details = &details;
    ops[5].data.recv_status_on_client.error_string = &error_string;

    int rc = 0;
    void *tag = call;
    grpc_call_error ce = grpc_call_start_batch(call, ops, 6, tag, NULL);
    if (ce != GRPC_CALL_OK) {
        rc = txo_error_set(why, TXO_EPUBLISH, "grpc publisher: %s: cannot start the call (%d)",
                           p->target, (int)ce);
        goto out;
    }
    grpc_event ev =
        grpc_completion_queue_next(p->cq, ms_from_now(p->deadline_ms + WAIT_MARGIN_MS), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        /* gRPC should have ended the call at its deadline; make sure it ends now. */
        grpc_call_cancel(call, NULL);
        ev = grpc_completion_queue_next(p->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    }
    TXO_ASSERT(ev.type == GRPC_OP_COMPLETE && ev.tag == tag);
    copy_slice(co->details, sizeof(co->details), details);
    if (co->details[0] == '\0' && error_string != NULL)
        copy_server_text(co->details, sizeof(co->details), error_string, strlen(error_string));
    if (co->status == GRPC_STATUS_OK) {
        co->response = recv_bb != NULL ? read_response(recv_bb) : NULL;
        co->body_unreadable = co->response == NULL;
    }

out:
    grpc_slice_unref(details);
    gpr_free((void *)(uintptr_t)error_string);
    grpc_byte_buffer_destroy(recv_bb);
    grpc_metadata_array_destroy(&initial_md);
    grpc_metadata_array_destroy(&trailing_md);
    grpc_byte_buffer_destroy(send_bb);
    grpc_call_unref(call);
    return rc;
}

/* Results of events [from, to) from a call's response. */
static void apply_response(const struct grpc_publisher *p, const Txo__V1__PublishResponse *resp,
                           const struct txo_outbox_message *msgs, size_t from, size_t to,
                           int *results, struct txo_error *errors)
{
    size_t n = to - from;
    struct txo_error why;
    txo_error_init(&why);
    if (resp->n_results != n) {
        txo_error_set(&why, TXO_EPUBLISH,
                      "grpc publisher: %s answered %zu results for %zu events; none counts as "
                      "delivered",
                      p->target, resp->n_results, n);
        fail_range(from, to, results, errors, &why);
        return;
    }
    for (size_t k = 0; k < n; k++) {
        int64_t event_id = resp->results[k]->event_id;
        if (event_id != 0 && event_id != msgs[from + k].id) {
            txo_error_set(&why, TXO_EPUBLISH,
                          "grpc publisher: %s answered results out of order (result %zu is for "
                          "event %" PRId64 "); none counts as delivered",
                          p->target, k, event_id);
            fail_range(from, to, results, errors, &why);
            return;
        }
    }
    for (size_t k = 0; k < n; k++) {
        const Txo__V1__Result *r = resp->results[k];
        size_t i = from + k;
        char reason[REASON_MAX + 1];
        copy_server_text(reason, sizeof(reason), r->reason != NULL ? r->reason : "",
                         r->reason != NULL ? strlen(r->reason) : 0);
        if (reason[0] == '\0')
            snprintf(reason, sizeof(reason), "no reason");
        switch (r->outcome) {
        case TXO__V1__RESULT__OUTCOME__ACCEPTED:
            results[i] = 0;
            break;
        case TXO__V1__RESULT__OUTCOME__REJECTED_PERMANENT:
            results[i] = txo_error_set(&errors[i], TXO_EBUSINESS,
                                       "grpc publisher: rejected permanently: %s", reason);
            break;
        case TXO__V1__RESULT__OUTCOME__REJECTED_TRANSIENT:
            results[i] = txo_error_set(&errors[i], TXO_EPUBLISH,
                                       "grpc publisher: rejected for now: %s", reason);
            break;
        default:
            results[i] = txo_error_set(&errors[i], TXO_EPUBLISH,
                                       "grpc publisher: result without a known outcome (%d); "
                                       "not delivered",
                                       (int)r->outcome);
            break;
        }
    }
}

/*
 * Sends events [from, to) as one call. Returns true when the call got an OK status (whatever
 * the per-event outcomes), false when it failed as a whole (every event of it failed with
 * *why).
 */
static bool send_request(struct grpc_publisher *p, const struct txo_outbox_message *msgs,
                         size_t from, size_t to, int *results, struct txo_error *errors,
                         struct txo_error *why)
{
    Txo__V1__PublishRequest req = TXO__V1__PUBLISH_REQUEST__INIT;
    req.n_events = to - from;
    req.events = &p->event_ptrs[from];
    size_t size = txo__v1__publish_request__get_packed_size(&req);

    struct call_outcome co;
    if (p->metrics.in_flight != NULL)
        txo_metric_add(p->metrics.in_flight, NULL, 1);
    int64_t t0 = txo_monotonic_us();
    int rc = call_publish(p, &req, size, &co, why);
    double seconds = (double)(txo_monotonic_us() - t0) / 1e6;
    if (p->metrics.in_flight != NULL) {
        txo_metric_add(p->metrics.in_flight, NULL, -1);
        txo_metric_observe(p->metrics.duration, NULL, seconds);
        if (rc == 0)
            txo_metric_inc(p->metrics.calls, (const char *const[]){status_name(co.status)});
    }
    if (rc < 0) {
        fail_range(from, to, results, errors, why);
        return false;
    }
    bool ok = co.status == GRPC_STATUS_OK;
    if (ok && co.body_unreadable) {
        txo_error_set(why, TXO_EPUBLISH,
                      "grpc publisher: %s answered OK with no readable PublishResponse; none "
                      "counts as delivered",
                      p->target);
        fail_range(from, to, results, errors, why);
    } else if (ok) {
        apply_response(p, co.response, msgs, from, to, results, errors);
    } else {
        txo_error_set(why, txo_grpc_status_code(co.status), "grpc publisher: %s: %s: %s", p->target,
                      status_name(co.status), co.details[0] != '\0' ? co.details : "no details");
        fail_range(from, to, results, errors, why);
    }
    TXO_LOG(TXO_LOG_DEBUG, "grpc", "call done", TXO_KV_STR("target", p->target),
            TXO_KV_U64("events", to - from), TXO_KV_U64("bytes", size),
            TXO_KV_STR("status", status_name(co.status)), TXO_KV_F64("duration_s", seconds));
    if (co.response != NULL)
        txo__v1__publish_response__free_unpacked(co.response, NULL);
    return ok;
}

static int grpc_publish_batch(void *self, const struct txo_outbox_message *msgs, size_t n,
                              int *results, struct txo_error *errors)
{
    struct grpc_publisher *p = self;
    struct txo_error why;
    txo_error_init(&why);
    if (n == 0)
        return 0;
    if (grow(p, n) < 0) {
        txo_error_set(&why, TXO_ENOMEM, "grpc publisher: out of memory for a batch of %zu", n);
        for (size_t i = 0; i < n; i++) {
            errors[i] = why;
            results[i] = why.code;
        }
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        results[i] = RESULT_PENDING;
        fill_event(&p->events[i], &msgs[i]);
        p->event_ptrs[i] = &p->events[i];
        p->sizes[i] = txo__v1__event__get_packed_size(&p->events[i]) + REQUEST_OVERHEAD;
        if (p->sizes[i] > p->max_batch_bytes)
            results[i] = txo_error_set(&errors[i], TXO_EINVAL,
                                       "grpc publisher: event of %zu bytes encoded is larger "
                                       "than max_batch_bytes (%zu)",
                                       p->sizes[i], p->max_batch_bytes);
    }

    /*
     * Requests of consecutive sendable events up to max_batch_bytes each. An event that is
     * too big is left out (it already failed); the events around it still go.
     */
    size_t i = 0;
    bool stopped = false;
    while (i < n && !stopped) {
        if (results[i] != RESULT_PENDING) {
            i++;
            continue;
        }
        size_t from = i;
        size_t bytes = 0;
        while (i < n && results[i] == RESULT_PENDING && bytes + p->sizes[i] <= p->max_batch_bytes)
            bytes += p->sizes[i++];
        stopped = !send_request(p, msgs, from, i, results, errors, &why);
    }
    if (stopped) {
        /* The server or the connection failed: the rest of the batch meets the same. */
        fail_range(i, n, results, errors, &why);
    }

    size_t n_ok = 0, n_permanent = 0;
    for (size_t k = 0; k < n; k++) {
        TXO_ASSERT(results[k] != RESULT_PENDING);
        n_ok += results[k] == 0;
        n_permanent += results[k] < 0 && !txo_err_is_transient(results[k]);
    }
    if (p->metrics.published != NULL) {
        txo_metric_add(p->metrics.published, NULL, (double)n_ok);
        txo_metric_add(p->metrics.failed, (const char *const[]){"permanent"}, (double)n_permanent);
        txo_metric_add(p->metrics.failed, (const char *const[]){"transient"},
                       (double)(n - n_ok - n_permanent));
    }
    return 0;
}

/* Publishers alive in the process: the last one gone waits for gRPC's shutdown. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned live_publishers;

/*
 * gRPC's own log lines (gpr_log, on stderr by default) go to txo's log, component "grpc":
 * library code writes nothing to stderr itself. Its errors are about connections that the
 * publisher reports anyway (a failed TLS handshake, a refused connect): warn; the rest debug.
 * Runs on any thread, gRPC's included.
 */
static void log_from_grpc(gpr_log_func_args *args)
{
    enum txo_log_level level =
        args->severity == GPR_LOG_SEVERITY_ERROR ? TXO_LOG_WARN : TXO_LOG_DEBUG;
    TXO_LOG(level, "grpc", "gRPC says",
            TXO_KV_STR("message", args->message != NULL ? args->message : ""),
            TXO_KV_STR("file", args->file), TXO_KV_I64("line", args->line));
}

static void take_grpc(void)
{
    pthread_mutex_lock(&live_mu);
    if (live_publishers++ == 0)
        gpr_set_log_function(log_from_grpc);
    grpc_init();
    pthread_mutex_unlock(&live_mu);
}

static void release_grpc(void)
{
    pthread_mutex_lock(&live_mu);
    grpc_shutdown();
    bool last = --live_publishers == 0;
    if (last) {
        /* Under live_mu, so that no publisher is created meanwhile (its grpc_init() would keep
         * gRPC up and this wait would last in vain). */
        int64_t until = txo_monotonic_ms() + SHUTDOWN_WAIT_MS;
        while (grpc_is_initialized() && txo_monotonic_ms() < until)
            txo_sleep_ms(1);
    }
    pthread_mutex_unlock(&live_mu);
}

static void grpc_publisher_destroy(void *self)
{
    struct grpc_publisher *p = self;
    if (p->channel != NULL)
        grpc_channel_destroy(p->channel);
    if (p->cq != NULL) {
        grpc_completion_queue_shutdown(p->cq);
        while (grpc_completion_queue_next(p->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
               GRPC_QUEUE_SHUTDOWN)
            ;
        grpc_completion_queue_destroy(p->cq);
    }
    txo_free(p->target);
    txo_free(p->events);
    txo_free(p->event_ptrs);
    txo_free(p->sizes);
    txo_free(p);
    release_grpc();
}

static const struct txo_publisher_ops grpc_ops = {
    .name = "grpc",
    .publish_batch = grpc_publish_batch,
    .destroy = grpc_publisher_destroy,
    .flags = 0, /* not QUICK: the server's handling runs before it answers */
};

#define PEM_MAX_BYTES (1024 * 1024)

/* Reads a PEM file whole into *out (NUL-terminated, txo_free()). TXO_ECONFIG when it cannot be
 * read, is empty or larger than PEM_MAX_BYTES. */
static int read_pem(const char *what, const char *path, char **out, struct txo_error *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return txo_error_set(err, TXO_ECONFIG, "grpc publisher: %s %s: %s", what, path,
                             strerror(errno));
    char *buf = txo_malloc(PEM_MAX_BYTES + 1);
    if (buf == NULL) {
        fclose(f);
        return txo_error_set(err, TXO_ENOMEM, "grpc publisher: out of memory");
    }
    size_t n = fread(buf, 1, PEM_MAX_BYTES + 1, f);
    bool failed = ferror(f) != 0;
    fclose(f);
    buf[n <= PEM_MAX_BYTES ? n : PEM_MAX_BYTES] = '\0';
    if (failed || n == 0 || n > PEM_MAX_BYTES) {
        txo__wipe_free(buf);
        return txo_error_set(err, TXO_ECONFIG, "grpc publisher: %s %s: %s", what, path,
                             failed   ? "read error"
                             : n == 0 ? "the file is empty"
                                      : "larger than 1 MiB");
    }
    *out = buf;
    return 0;
}

/* The channel's credentials: insecure, or TLS from the PEM files of o. */
static int make_credentials(const struct txo_grpc_opts *o, grpc_channel_credentials **out,
                            struct txo_error *err)
{
    if (o->ca_file == NULL) {
        *out = grpc_insecure_credentials_create();
        return 0;
    }
    char *ca = NULL, *cert = NULL, *key = NULL;
    int rc = read_pem("ca_file", o->ca_file, &ca, err);
    if (rc == 0 && o->cert_file != NULL)
        rc = read_pem("cert_file", o->cert_file, &cert, err);
    if (rc == 0 && o->key_file != NULL)
        rc = read_pem("key_file", o->key_file, &key, err);
    if (rc == 0) {
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        *out = grpc_ssl_credentials_create(ca, cert != NULL ? &pair : NULL, NULL, NULL);
        if (*out == NULL)
            rc = txo_error_set(err, TXO_ECONFIG,
                               "grpc publisher: gRPC refused the TLS files (ca_file %s)",
                               o->ca_file);
    }
    txo_free(ca);
    txo_free(cert);
    txo__wipe_free(key);
    return rc;
}

static grpc_arg int_arg(const char *key, int64_t value)
{
    grpc_arg a;
    memset(&a, 0, sizeof(a));
    a.type = GRPC_ARG_INTEGER;
    a.key = (char *)(uintptr_t)key;
    a.value.integer = (int)value;
    return a;
}

static int grpc_publisher_init(void *self, const struct txo__transport_args *a,
                               struct txo_error *err)
{
    struct grpc_publisher *p = self;
    const struct txo_grpc_opts *o = a->opts;
    take_grpc(); /* released by grpc_publisher_destroy() from here on */
    p->target = txo_strdup(o->target);
    p->deadline_ms = o->deadline_ms;
    p->max_batch_bytes = o->max_batch_bytes;
    if (p->target == NULL)
        return txo_error_set(err, TXO_ENOMEM, "grpc publisher: out of memory");
    int rc = register_metrics(&p->metrics, a->metrics, err);
    if (rc < 0)
        return rc;

    int64_t reconnect_first =
        o->reconnect_max_ms < RECONNECT_FIRST_MS ? o->reconnect_max_ms : RECONNECT_FIRST_MS;
    /* gRPC gives each connection attempt at least this long (its "min reconnect backoff"):
     * about a call's deadline, so a slow handshake is not cut short and retried forever. */
    int64_t connect_ms = o->deadline_ms < CONNECT_MIN_MS   ? CONNECT_MIN_MS
                         : o->deadline_ms > CONNECT_MAX_MS ? CONNECT_MAX_MS
                                                           : o->deadline_ms;
    grpc_arg args[] = {
        int_arg(GRPC_ARG_KEEPALIVE_TIME_MS, o->keepalive_ms),
        int_arg(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, o->keepalive_timeout_ms),
        int_arg(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0),
        int_arg(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, reconnect_first),
        int_arg(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, connect_ms),
        int_arg(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, o->reconnect_max_ms),
        int_arg(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, (int64_t)o->max_batch_bytes + 1024),
        /* The relay retries by itself, with its own backoff and attempt count. */
        int_arg(GRPC_ARG_ENABLE_RETRIES, 0),
    };
    grpc_channel_args cargs = {sizeof(args) / sizeof(args[0]), args};
    grpc_channel_credentials *creds = NULL;
    rc = make_credentials(o, &creds, err);
    if (rc < 0)
        return rc;
    p->channel = grpc_channel_create(o->target, creds, &cargs);
    grpc_channel_credentials_release(creds);
    p->cq = grpc_completion_queue_create_for_next(NULL);
    if (p->channel == NULL || p->cq == NULL)
        return txo_error_set(err, TXO_ECONFIG, "grpc publisher: cannot open a channel to \"%s\"",
                             o->target);
    /* Start connecting now, so the first batch does not pay for it. */
    (void)grpc_channel_check_connectivity_state(p->channel, 1);
    TXO_LOG(TXO_LOG_INFO, "grpc", "publisher ready", TXO_KV_STR("target", o->target),
            TXO_KV_STR("tls", o->ca_file == NULL     ? "off"
                              : o->cert_file != NULL ? "mutual"
                                                     : "on"),
            TXO_KV_I64("deadline_ms", o->deadline_ms), TXO_KV_I64("keepalive_ms", o->keepalive_ms),
            TXO_KV_U64("max_batch_bytes", o->max_batch_bytes));
    return 0;
}

int txo_publisher_grpc_new(const struct txo_grpc_opts *o, struct txo_metrics *metrics,
                           struct txo_publisher **out, struct txo_error *err)
{
    int rc = check_opts(o, err);
    if (rc < 0)
        return rc;
    struct txo__transport_args a = {.opts = o, .metrics = metrics};
    return txo__publisher_build(&grpc_ops, sizeof(struct grpc_publisher), grpc_publisher_init, &a,
                                out, err);
}
