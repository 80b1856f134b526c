#include "core/common.h"

/*
 * The local dispatch publisher (txo/consumer.h): the consuming side without a broker. The
 * relay hands each claimed batch straight to the application's handler, in the relay's thread:
 * as events when the handler takes them (h.events, no envelope written and read back in one
 * process), else as envelopes.
 * The outbox row is the queue and the relay's retry with backoff is the redelivery: a handler
 * failure is a publish failure, so the row stays PENDING (attempts+1, last_error,
 * next_attempt_at) and is offered again later; after max_attempts it is dead-lettered like any
 * event. Delivery is at least once (a relay that dies after the handler committed and before
 * marking the row calls it again), so the handler de-duplicates on msg_id like any consumer.
 *
 * It is a quick publisher (TXO_PUBLISHER_QUICK): the handler's work is one short transaction
 * of the consuming side, which takes no lock on the outbox rows the relay holds, so the relay
 * dispatches while holding the batch's row locks and marks each event once (claim mode
 * TRANSACTION, txo/relay.h) unless told to use leases.
 *
 * Ownership: the publisher copies the handler description and borrows its arg. Thread-safety:
 * used by one relay at a time; the handler runs on that relay's thread.
 */

#include "broker/consumer_internal.h"
#include "broker/transport.h"

struct local_publisher {
    struct txo_handler h;
};

/* Logs a failed message (the reason goes to the outbox row's last_error). */
static void log_failure(const struct txo_outbox_message *m, int rc, const struct txo_error *e)
{
    TXO_LOG(TXO_LOG_DEBUG, "local", "handler failed",
            TXO_KV_STR("message_id", m->idempotency_key != NULL ? m->idempotency_key : ""),
            TXO_KV_I64("attempt", m->attempt), TXO_KV_STR("error", txo_err_name(rc)),
            TXO_KV_BOOL("transient", txo_err_is_transient(rc)), TXO_KV_STR("reason", e->msg));
}

/* The handler's code as a publish result: a TXO_E* code, with a reason. */
static int publish_result(int rc, struct txo_error *e)
{
    if (rc > 0) /* not a TXO_E* code */
        rc = TXO_EPUBLISH;
    if (rc < 0 && e->msg[0] == '\0')
        txo_error_set(e, rc, "local handler: %s", txo_strerror(rc));
    return rc;
}

/* The batch to h->events: the events that decode, in order, with no envelope in between. */
static int local_publish_events(const struct local_publisher *lp,
                                const struct txo_outbox_message *msgs, size_t n, int *results,
                                struct txo_error *errors)
{
    struct txo_event *evs = txo_calloc(n, sizeof(*evs));
    size_t *at = txo_calloc(n, sizeof(*at));
    int *res = txo_calloc(n, sizeof(*res));
    struct txo_error *errs = txo_calloc(n, sizeof(*errs));
    size_t m = 0;
    int rc = 0;
    if (evs == NULL || at == NULL || res == NULL || errs == NULL) {
        rc = TXO_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (txo_event_from_outbox(&msgs[i], &evs[m], &errors[i]) != 0) {
            results[i] = errors[i].code != 0 ? errors[i].code : TXO_EINVAL;
            continue;
        }
        txo_error_init(&errs[m]);
        at[m++] = i;
    }
    if (m > 0)
        rc = lp->h.events(lp->h.arg, evs, m, res, errs);
    for (size_t k = 0; rc == 0 && k < m; k++) {
        size_t i = at[k];
        errors[i] = errs[k];
        results[i] = publish_result(res[k], &errors[i]);
        if (results[i] < 0)
            log_failure(&msgs[i], results[i], &errors[i]);
    }
out:
    for (size_t k = 0; evs != NULL && k < m; k++)
        txo_event_release(&evs[k]);
    txo_free(evs);
    txo_free(at);
    txo_free(res);
    txo_free(errs);
    return rc;
}

/* The batch to the handler: as events when it takes them, else the envelopes that encode, in
 * order. */
static int local_publish_batch(void *self, const struct txo_outbox_message *msgs, size_t n,
                               int *results, struct txo_error *errors)
{
    struct local_publisher *lp = self;
    if (lp->h.events != NULL)
        return local_publish_events(lp, msgs, n, results, errors);
    char **envs = txo_calloc(n, sizeof(*envs));
    size_t *at = txo_calloc(n, sizeof(*at));
    struct txo__handler_batch b;
    int rc = 0;
    if (!txo__handler_batch_alloc(&b, n) || envs == NULL || at == NULL) {
        rc = TXO_ENOMEM;
        goto out;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        envs[i] = txo_envelope_encode(&msgs[i], &len, &errors[i]);
        if (envs[i] == NULL) {
            results[i] = errors[i].code != 0 ? errors[i].code : TXO_EINVAL;
            continue;
        }
        b.in[m] = (struct txo_inbound_message){
            .data = envs[i],
            .len = len,
            .msg_id = msgs[i].idempotency_key,
            .delivery = msgs[i].attempt > 0 ? (uint64_t)msgs[i].attempt : 1,
        };
        at[m++] = i;
    }
    if (m > 0) {
        rc = txo__handler_run(&lp->h, b.in, m, b.results, b.errors);
        for (size_t k = 0; rc == 0 && k < m; k++) {
            errors[at[k]] = b.errors[k];
            results[at[k]] = publish_result(b.results[k], &errors[at[k]]);
            if (results[at[k]] < 0)
                log_failure(&msgs[at[k]], results[at[k]], &errors[at[k]]);
        }
    }
out:
    for (size_t i = 0; envs != NULL && i < n; i++)
        txo_free(envs[i]);
    txo_free(envs);
    txo_free(at);
    txo__handler_batch_release(&b);
    return rc;
}

static const struct txo_publisher_ops local_ops = {
    .name = "local",
    .flags = TXO_PUBLISHER_QUICK,
    .publish_batch = local_publish_batch,
    .destroy = txo_free,
};

static int local_init(void *self, const struct txo__transport_args *a, struct txo_error *err)
{
    (void)err;
    struct local_publisher *lp = self;
    lp->h = *a->h;
    return 0;
}

int txo_publisher_local_new(const struct txo_handler *h, struct txo_publisher **out,
                            struct txo_error *err)
{
    int rc = txo__handler_check(h, "local publisher", err);
    if (rc < 0)
        return rc;
    struct txo__transport_args a = {.h = h};
    return txo__publisher_build(&local_ops, sizeof(struct local_publisher), local_init, &a, out,
                                err);
}
