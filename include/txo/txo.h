/*
 * Umbrella header: everything public in libtxo. The headers of the brokers come in only when
 * the library was built with them (txo/features.h).
 */
#ifndef TXO_TXO_H
#define TXO_TXO_H

#include "txo/common.h"
#include "txo/features.h"
#include "txo/err.h"
#include "txo/alloc.h"
#include "txo/log.h"
#include "txo/clock.h"
#include "txo/text.h"
#include "txo/owner.h"
#include "txo/backoff.h"
#include "txo/crash.h"
#include "txo/db.h"
#include "txo/outbox.h"
#include "txo/publisher.h"
#include "txo/claim.h"
#include "txo/relay.h"
#include "txo/binlog.h"
#include "txo/saga.h"
#include "txo/worker.h"
#include "txo/idempotency.h"
#include "txo/http_server.h"
#include "txo/http_client.h"
#include "txo/webhook.h"
#include "txo/consumer.h"
#if TXO_WITH_NATS
#include "txo/nats.h"
#endif
#if TXO_WITH_KAFKA
#include "txo/kafka.h"
#endif
#if TXO_WITH_REDIS
#include "txo/redis.h"
#endif
#if TXO_WITH_RABBITMQ
#include "txo/rabbitmq.h"
#endif
#if TXO_WITH_GRPC
#include "txo/grpc.h"
#endif
#include "txo/retry.h"
#include "txo/breaker.h"
#include "txo/bulkhead.h"
#include "txo/ratelimit.h"
#include "txo/metrics.h"
#include "txo/inbox.h"
#include "txo/cmdq.h"
#include "txo/dlq.h"
#include "txo/partition.h"
#include "txo/replay.h"
#include "txo/retention.h"
#include "txo/archive.h"
#include "txo/history.h"
#include "txo/audit.h"
#include "txo/registry.h"
#include "txo/admin.h"

#endif
