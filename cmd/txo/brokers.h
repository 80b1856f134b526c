/*
 * The brokers the daemons publish to and consume from, by name: `txo relay --publisher NAME`,
 * `txo worker --broker NAME` and `txo up --broker NAME`. Each broker is one file,
 * broker_<name>.c, that defines a struct cmd_broker: its own settings (--<name>-* flags,
 * TXO_<NAME>_* variables, kept in that file) and how to make its publisher and consumer from
 * them. Adding a broker is that file plus one line in the table of brokers.c (and its
 * TXO_WITH_<NAME> in CMakeLists.txt and cmake/features.h.in); the commands know nothing else
 * about it.
 *
 * Each broker is an optional part of the build (-DTXO_WITH_<NAME>=OFF): a broker left out has
 * its row in that table still, with no struct cmd_broker, so that the commands refuse it by
 * name (cmd_broker_refuse_left_out) instead of calling it unknown. Everything else here sees
 * only the brokers built in.
 *
 * The settings of every broker built in are in every daemon's table (and so in its --help and
 * docs/config.md); only the chosen broker's are used.
 */
#ifndef TXO_CMD_BROKERS_H
#define TXO_CMD_BROKERS_H

#include <stdbool.h>

#include "settings.h"
#include "txo/consumer.h"
#include "txo/history.h"
#include "txo/metrics.h"
#include "txo/publisher.h"

struct cmd_broker {
    const char *name;    /* "nats" */
    const char *summary; /* "NATS JetStream": what --help says next to the name */
    /* The broker's settings (targets in the broker's file), for every daemon's table. */
    const struct setting *settings;
    size_t n_settings;
    /* The relay's publisher from those settings; metrics (may be NULL) gets its families. */
    int (*publisher_new)(struct txo_metrics *metrics, struct txo_publisher **out,
                         struct txo_error *err);
    /*
     * A consumer of the events of aggregate_type and event_type ("order", "OrderCreated")
     * running the handler h (txo/consumer.h) on what it receives; metrics as above. NULL when
     * the broker has no consuming side (the worker refuses it).
     */
    int (*consumer_new)(const char *aggregate_type, const char *event_type,
                        const struct txo_handler *h, struct txo_metrics *metrics,
                        struct txo_consumer **out, struct txo_error *err);
    /*
     * A reader of what the broker stored (txo/history.h), for `txo audit --outbox`, from the
     * same settings as the publisher. NULL when the broker keeps no history that can be read
     * without consuming it; no_history then says why, for --help and the error message.
     */
    int (*history_new)(struct txo_history **out, struct txo_error *err);
    const char *no_history;
    /* Releases the SDK's process-wide state (its threads) once every publisher, consumer and
     * reader of the broker is freed, so that nothing is left for valgrind. NULL: nothing to
     * do. */
    void (*shutdown)(void);
};

extern const struct cmd_broker cmd_broker_nats;
extern const struct cmd_broker cmd_broker_kafka;
extern const struct cmd_broker cmd_broker_redis;
extern const struct cmd_broker cmd_broker_rabbitmq;
extern const struct cmd_broker cmd_broker_grpc;

/* What `txo worker --broker` consumes from by default: the first broker built in with a
 * consuming side (nats in a full build), or "none" in a build without any. Never NULL. */
const char *cmd_broker_default_consumer(void);

/* The broker built in called name, or NULL. */
const struct cmd_broker *cmd_broker_find(const char *name);

/*
 * When name is a broker this build left out, says so on stderr ("txo relay: --publisher kafka:
 * txo was built without Kafka (-DTXO_WITH_KAFKA=OFF)", command and flag named by cmd and flag)
 * and returns true: the command then exits 2. False for any other name.
 */
bool cmd_broker_refuse_left_out(const char *cmd, const char *flag, const char *name);

/*
 * "nats, kafka, redis, rabbitmq, grpc": the brokers built in, for --version and --help; "none"
 * when there is none. Never NULL.
 */
const char *cmd_brokers_built(void);

/* "kafka, grpc": the brokers left out (-DTXO_WITH_<NAME>=OFF), or "". Never NULL. */
const char *cmd_brokers_left_out(void);

/* Appends every broker's settings. */
void cmd_brokers_add_settings(struct settings_table *t);

/* Appends the settings of the brokers with a history reader (`txo audit --outbox`). */
void cmd_brokers_add_history_settings(struct settings_table *t);

/* Calls b->shutdown when there is one. NULL is a no-op. */
void cmd_broker_shutdown(const struct cmd_broker *b);

/*
 * The help of a daemon's broker choice, listing the brokers: for `txo relay --publisher`
 * (the relay's other publishers first), `txo worker --broker` (only brokers with a consumer)
 * and `txo up --broker` (local dispatch first). Built once; never NULL.
 */
enum cmd_broker_choice {
    CMD_BROKER_CHOICE_RELAY,
    CMD_BROKER_CHOICE_WORKER,
    CMD_BROKER_CHOICE_UP,
};
const char *cmd_broker_choice_help(enum cmd_broker_choice choice);

/*
 * "log, null, webhook, nats or kafka": what the choice takes, for the message that refuses
 * anything else. Never NULL.
 */
const char *cmd_broker_names(enum cmd_broker_choice choice);

/*
 * For a daemon that consumes (choice CMD_BROKER_CHOICE_WORKER or _UP): appends its --broker
 * (TXO_BROKER, target *name; default: the first consumer built in for the worker, local for up)
 * and then every broker's own settings.
 */
void cmd_brokers_add_consumer_choice(struct settings_table *t, enum cmd_broker_choice choice,
                                     const char **name);

/*
 * The broker the daemon cmd consumes from, given as --broker name: true with *out the broker,
 * or NULL for the choice that is not a broker (none for the worker, local for up). False after
 * saying on stderr why name is refused (the command exits 2).
 */
bool cmd_broker_choose_consumer(const char *cmd, enum cmd_broker_choice choice, const char *name,
                                const struct cmd_broker **out);

/* "nats, kafka or redis": the brokers with a history reader, or "". Never NULL. */
const char *cmd_broker_history_names(void);

#endif
