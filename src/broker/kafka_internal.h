/*
 * Private to the Kafka transport (kafka_publisher.c, kafka_consumer.c, kafka_history.c): option
 * checks, the librdkafka configuration each side builds, the log bridge and the mapping of
 * librdkafka errors to TXO_E* codes. The helpers are defined in kafka_publisher.c.
 *
 * Only src/broker/kafka_*.c include <librdkafka/rdkafka.h>. This header is marked as a system
 * header so that -Wpedantic judges our code, not librdkafka's declarations.
 */
#ifndef TXO_BROKER_KAFKA_INTERNAL_H
#define TXO_BROKER_KAFKA_INTERNAL_H

#pragma GCC system_header

#include <librdkafka/rdkafka.h>

/*
 * librdkafka's RD_KAFKA_V_* argument macros type-check through GNU statement expressions,
 * which clang's -Wpedantic reports at every use in our files (GCC exempts macros from system
 * headers). Only the Kafka files include this header, so only they lose that one warning.
 */
#ifdef __clang__
#pragma clang diagnostic ignored "-Wgnu-statement-expression"
#endif

#include "txo/kafka.h"

/* Longest topic Kafka accepts. */
#define TXO__KAFKA_TOPIC_MAX 249

/* Checks every setting used by role ("publisher", "consumer" or "history"). Returns 0 or
 * TXO_EINVAL. */
int txo__kafka_check_opts(const struct txo_kafka_opts *o, const char *role, struct txo_error *err);

/*
 * A librdkafka configuration for role: bootstrap.servers, the log bridge (component "kafka"),
 * then the n_fixed pairs fixed[2k] = fixed[2k+1] txo needs, then the user's properties.
 * Returns 0 with *out to pass to rd_kafka_new() (or rd_kafka_conf_destroy()), or TXO_EINVAL /
 * TXO_ECONFIG / TXO_ENOMEM naming the property.
 */
int txo__kafka_conf_new(const struct txo_kafka_opts *o, const char *role, const char *const *fixed,
                        size_t n_fixed, rd_kafka_conf_t **out, struct txo_error *err);

/* The txo code for a librdkafka error (0 for NO_ERROR): see txo/kafka.h for the classes. */
int txo__kafka_code(rd_kafka_resp_err_t e);

#endif
