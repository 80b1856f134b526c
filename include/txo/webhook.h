/*
 * The webhook publisher: the relay POSTs each outbox event to one HTTP endpoint.
 *
 * The contract with the receiver (docs/external-services.md):
 *   POST <url>
 *   Content-Type: application/json
 *   Idempotency-Key: <the event's idempotency_key>   the receiver's de-duplication key
 *   X-Txo-Event-Type: <event_type>                   route without parsing the body
 *   X-Txo-Event-Id: <outbox id>
 *   Authorization: Bearer <token>                    only when a token is configured
 *   body: the published envelope (include/txo/publisher.h), attempt number included
 * Only a 2xx answer counts as delivered. Anything else (another status, a timeout, a refused
 * connection) fails that event with the HTTP client's code (include/txo/http_client.h) and a
 * reason such as "POST http://hooks/x: HTTP 503: <body excerpt>"; the relay retries it with
 * backoff and, after its attempt limit, dead-letters it. Delivery is at least once: an event
 * whose 2xx was lost in transit is sent again with the same Idempotency-Key.
 *
 * A batch is sent on one kept-alive connection, one event after the other. It stops early when
 * the endpoint is plainly unavailable: after a failure with no HTTP answer (connect refused,
 * timeout, reset) or an answer of 429 or 503, every remaining event of the batch fails at once
 * with that same error, so a dead endpoint costs one timeout per batch, not one per event.
 *
 * Thread-safety: a publisher is used by one relay (one thread) at a time.
 */
#ifndef TXO_WEBHOOK_H
#define TXO_WEBHOOK_H

#include <stdint.h>

#include "txo/common.h"
#include "txo/err.h"
#include "txo/publisher.h"

struct txo_webhook_opts {
    const char *url;            /* http:// or https:// endpoint; required; copied */
    int64_t connect_timeout_ms; /* default 2000 (0 = default) */
    int64_t timeout_ms;         /* whole request, default 5000 (0 = default) */
    const char *bearer_token;   /* optional; sent as Authorization: Bearer; copied, secret:
                                 * never logged, wiped when the publisher is freed */
};

/* Sets url and bearer_token to NULL and the timeouts to their defaults. Never fails. */
TXO_API void txo_webhook_opts_init(struct txo_webhook_opts *opts);

/*
 * Creates a webhook publisher; free it with txo_publisher_free(). Connects lazily, on the first
 * publish. *out is written only on success. Errors: TXO_ECONFIG (no URL, a scheme other than
 * http/https, a token with CR/LF), TXO_EINVAL (negative timeout), TXO_ENOMEM, TXO_EIO.
 */
TXO_API TXO_MUST_CHECK int txo_publisher_webhook_new(const struct txo_webhook_opts *opts,
                                                     struct txo_publisher **out,
                                                     struct txo_error *err);

#endif
