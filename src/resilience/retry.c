/*
 * Retry with exponential backoff and jitter (include/txo/retry.h).
 *
 * Each call gets a fresh, private struct txo_error, and only the detail of the call that ends
 * the loop is copied to the caller's: a success after two transient failures leaves the
 * caller's err untouched, as every successful txo call does.
 *
 * The delay before retry n (n = failed calls so far) is txo_backoff_delay_ms(backoff, n, r)
 * with r from the policy's rand01, slept through the policy's clock; nothing else waits.
 *
 * Thread-safety: no state of its own; the policy is only read.
 */
#include "core/common.h"

#include "txo/retry.h"

void txo_retry_policy_init(struct txo_retry_policy *p)
{
    TXO_ASSERT(p != NULL);
    *p = (struct txo_retry_policy){
        .max_attempts = 3,
        .backoff = {.base_ms = 100, .max_ms = 2000, .jitter = 0.5},
        .clock = NULL,
        .rand01 = NULL,
        .rand_arg = NULL,
    };
}

/* Passes the failure of the last call to the caller's err. */
static int report(struct txo_error *err, const struct txo_error *last, int rc)
{
    if (err == NULL)
        return rc;
    if (last->code == rc) {
        *err = *last;
        return rc;
    }
    /* fn returned a code without detail (or detail for another code): describe the code. */
    return txo_error_set(err, rc, "%s", txo_strerror(rc));
}

int txo_retry_run(const struct txo_retry_policy *p, txo_retry_fn fn, void *arg,
                  unsigned *attempts_out, struct txo_error *err)
{
    TXO_ASSERT(p != NULL);
    TXO_ASSERT(fn != NULL);

    if (attempts_out != NULL)
        *attempts_out = 0;
    if (p->max_attempts == 0)
        return txo_error_set(err, TXO_EINVAL, "retry policy: max_attempts must be >= 1");

    const struct txo_clock *clock = p->clock != NULL ? p->clock : txo_clock_system();
    struct txo_error last;
    int rc = 0;

    for (unsigned attempt = 1;; attempt++) {
        txo_error_init(&last);
        rc = fn(arg, attempt, &last);
        if (attempts_out != NULL)
            *attempts_out = attempt;
        if (rc == 0)
            return 0;
        if (rc > 0 || !txo_err_is_transient(rc) || attempt >= p->max_attempts)
            break;

        double r = p->rand01 != NULL ? p->rand01(p->rand_arg) : txo_rand01();
        int64_t delay_ms = txo_backoff_delay_ms(&p->backoff, attempt, r);
        TXO_LOG(TXO_LOG_DEBUG, "retry", "transient failure, retrying",
                TXO_KV_U64("attempt", attempt), TXO_KV_U64("max_attempts", p->max_attempts),
                TXO_KV_I64("delay_ms", delay_ms), TXO_KV_STR("code", txo_err_name(rc)),
                TXO_KV_STR("err", last.msg));
        if (delay_ms > 0)
            clock->sleep_ms(clock->arg, delay_ms);
    }
    return report(err, &last, rc);
}
