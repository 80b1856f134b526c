/* The table of brokers (brokers.h). */
#include "brokers.h"
#include "cli_errors.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "txo/features.h"

struct row {
    const char *name;               /* "kafka": what --publisher and --broker take */
    const char *title;              /* "Kafka": how the refusal of a broker left out names it */
    const char *option;             /* "TXO_WITH_KAFKA": the CMake option that builds it */
    const struct cmd_broker *built; /* NULL: left out of this build */
};

/*
 * One row per broker, in the order --help lists them, built in or not. A broker left out
 * (TXO_WITH_<NAME> is 0 in txo/features.h) has no broker_<name>.c in the build: its condition
 * is a constant, so its row's initializer is NULL and refers to nothing.
 */
static const struct row rows[] = {
    {"nats", "NATS", "TXO_WITH_NATS", TXO_WITH_NATS ? &cmd_broker_nats : NULL},
    {"kafka", "Kafka", "TXO_WITH_KAFKA", TXO_WITH_KAFKA ? &cmd_broker_kafka : NULL},
    {"redis", "Redis", "TXO_WITH_REDIS", TXO_WITH_REDIS ? &cmd_broker_redis : NULL},
    {"rabbitmq", "RabbitMQ", "TXO_WITH_RABBITMQ", TXO_WITH_RABBITMQ ? &cmd_broker_rabbitmq : NULL},
    {"grpc", "gRPC", "TXO_WITH_GRPC", TXO_WITH_GRPC ? &cmd_broker_grpc : NULL},
};

const char *cmd_broker_default_consumer(void)
{
    for (size_t i = 0; i < TXO_ARRAY_LEN(rows); i++)
        if (rows[i].built != NULL && rows[i].built->consumer_new != NULL)
            return rows[i].name;
    return "none";
}

const struct cmd_broker *cmd_broker_find(const char *name)
{
    for (size_t i = 0; i < TXO_ARRAY_LEN(rows); i++)
        if (name != NULL && strcmp(rows[i].name, name) == 0)
            return rows[i].built;
    return NULL;
}

bool cmd_broker_refuse_left_out(const char *cmd, const char *flag, const char *name)
{
    for (size_t i = 0; i < TXO_ARRAY_LEN(rows); i++)
        if (name != NULL && strcmp(rows[i].name, name) == 0 && rows[i].built == NULL) {
            cli_error("txo %s: --%s %s: txo was built without %s (-D%s=OFF)", cmd, flag, name,
                      rows[i].title, rows[i].option);
            return true;
        }
    return false;
}

void cmd_brokers_add_settings(struct settings_table *t)
{
    for (size_t i = 0; i < TXO_ARRAY_LEN(rows); i++)
        if (rows[i].built != NULL)
            settings_add(t, rows[i].built->settings, rows[i].built->n_settings);
}

void cmd_brokers_add_history_settings(struct settings_table *t)
{
    for (size_t i = 0; i < TXO_ARRAY_LEN(rows); i++)
        if (rows[i].built != NULL && rows[i].built->history_new != NULL)
            settings_add(t, rows[i].built->settings, rows[i].built->n_settings);
}

/* What --broker takes besides the brokers: no consumer (the worker) or local dispatch (up). */
static const char *no_broker(enum cmd_broker_choice choice)
{
    return choice == CMD_BROKER_CHOICE_UP ? "local" : "none";
}

void cmd_brokers_add_consumer_choice(struct settings_table *t, enum cmd_broker_choice choice,
                                     const char **name)
{
    const struct setting broker[] = {
        {.name = "broker",
         .env = "TXO_BROKER",
         .type = SETTING_STRING,
         .def = choice == CMD_BROKER_CHOICE_UP ? no_broker(choice) : cmd_broker_default_consumer(),
         .help = cmd_broker_choice_help(choice),
         .target = name},
    };
    settings_add(t, broker, TXO_ARRAY_LEN(broker));
    cmd_brokers_add_settings(t);
}

bool cmd_broker_choose_consumer(const char *cmd, enum cmd_broker_choice choice, const char *name,
                                const struct cmd_broker **out)
{
    if (cmd_broker_refuse_left_out(cmd, "broker", name))
        return false;
    const struct cmd_broker *broker = cmd_broker_find(name);
    if (strcmp(name, no_broker(choice)) != 0 && (broker == NULL || broker->consumer_new == NULL)) {
        cli_error("txo %s: --broker must be %s, got \"%s\"%s", cmd, cmd_broker_names(choice), name,
                  broker != NULL ? " (a broker without a consuming side)" : "");
        return false;
    }
    *out = broker;
    return true;
}

void cmd_broker_shutdown(const struct cmd_broker *b)
{
    if (b != NULL && b->shutdown != NULL)
        b->shutdown();
}

/* The texts, built once from the table (pthread_once: the commands may ask from any thread). */
static struct {
    char names[3][256];
    char history_names[256];
    char help[3][1024];
    char built[256];
    char left_out[256];
} texts;
static pthread_once_t texts_once = PTHREAD_ONCE_INIT;

/* Which brokers a list names. */
enum which {
    WHICH_ALL,
    WHICH_CONSUMERS, /* with a consumer */
    WHICH_HISTORY,   /* with a history reader */
};

static bool listed(const struct cmd_broker *b, enum which which)
{
    return b != NULL &&
           (which == WHICH_ALL || (which == WHICH_CONSUMERS && b->consumer_new != NULL) ||
            (which == WHICH_HISTORY && b->history_new != NULL));
}

static size_t count_listed(enum which which)
{
    size_t n = 0;
    for (size_t i = 0; i < TXO_ARRAY_LEN(rows); i++)
        n += listed(rows[i].built, which);
    return n;
}

/*
 * Appends "a (A), b (B) or c (C)" (with_summary) or "a, b or c" to buf[used..size): the
 * brokers built in that which names, after the n_fixed choices already in buf.
 */
static void list_brokers(char *buf, size_t size, enum which which, bool with_summary,
                         size_t n_fixed)
{
    size_t n = n_fixed + count_listed(which);
    size_t k = n_fixed;
    for (size_t i = 0; i < TXO_ARRAY_LEN(rows); i++) {
        const struct cmd_broker *b = rows[i].built;
        if (!listed(b, which))
            continue;
        size_t used = strlen(buf);
        const char *sep = k == 0 ? "" : k + 1 == n ? " or " : ", ";
        if (with_summary)
            snprintf(buf + used, size - used, "%s%s (%s)", sep, b->name, b->summary);
        else
            snprintf(buf + used, size - used, "%s%s", sep, b->name);
        k++;
    }
}

/*
 * Writes the choices of a flag that are not brokers to buf: "x, y", or "x or y" when no broker
 * follows them.
 */
static void list_fixed(char *buf, size_t size, const char *const *fixed, size_t n_fixed,
                       enum which which)
{
    bool brokers = count_listed(which) > 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n_fixed; i++) {
        size_t used = strlen(buf);
        const char *sep = i == 0 ? "" : i + 1 == n_fixed && !brokers ? " or " : ", ";
        snprintf(buf + used, size - used, "%s%s", sep, fixed[i]);
    }
}

static void build_names(enum cmd_broker_choice choice, const char *const *fixed, size_t n_fixed,
                        enum which which)
{
    list_fixed(texts.names[choice], sizeof(texts.names[choice]), fixed, n_fixed, which);
    list_brokers(texts.names[choice], sizeof(texts.names[choice]), which, false, n_fixed);
}

/* Writes the help of a choice: lead followed by the brokers, or alone when none is built in. */
static void build_help(enum cmd_broker_choice choice, const char *lead, const char *alone,
                       enum which which)
{
    char *h = texts.help[choice];
    size_t hs = sizeof(texts.help[choice]);
    if (count_listed(which) == 0) {
        snprintf(h, hs, "%s", alone);
        return;
    }
    snprintf(h, hs, "%s", lead);
    list_brokers(h, hs, which, true, 0);
}

static void build_texts(void)
{
    static const char *const relay[] = {"log", "null", "webhook"};
    static const char *const worker[] = {"none"};
    static const char *const up[] = {"local"};
    build_names(CMD_BROKER_CHOICE_RELAY, relay, TXO_ARRAY_LEN(relay), WHICH_ALL);
    build_names(CMD_BROKER_CHOICE_WORKER, worker, TXO_ARRAY_LEN(worker), WHICH_CONSUMERS);
    build_names(CMD_BROKER_CHOICE_UP, up, TXO_ARRAY_LEN(up), WHICH_CONSUMERS);
    list_brokers(texts.history_names, sizeof(texts.history_names), WHICH_HISTORY, false, 0);

    build_help(CMD_BROKER_CHOICE_RELAY,
               "where events go: log (JSON lines on stdout), null (discard), webhook (HTTP POST) "
               "or a broker: ",
               "where events go: log (JSON lines on stdout), null (discard) or webhook (HTTP "
               "POST); this txo has no broker built in",
               WHICH_ALL);
    build_help(CMD_BROKER_CHOICE_WORKER, "where OrderCreated comes from: none, or a broker: ",
               "where OrderCreated comes from: none (this txo has no broker built in)",
               WHICH_CONSUMERS);
    build_help(CMD_BROKER_CHOICE_UP,
               "how events reach the worker: local (in-process dispatch), or a broker: ",
               "how events reach the worker: local (in-process dispatch; this txo has no broker "
               "built in)",
               WHICH_CONSUMERS);

    for (size_t i = 0; i < TXO_ARRAY_LEN(rows); i++) {
        bool in = rows[i].built != NULL;
        char *buf = in ? texts.built : texts.left_out;
        size_t size = in ? sizeof(texts.built) : sizeof(texts.left_out);
        size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%s%s", used == 0 ? "" : ", ", rows[i].name);
    }
    if (texts.built[0] == '\0')
        snprintf(texts.built, sizeof(texts.built), "none");
}

const char *cmd_broker_choice_help(enum cmd_broker_choice choice)
{
    pthread_once(&texts_once, build_texts);
    return texts.help[choice];
}

const char *cmd_broker_names(enum cmd_broker_choice choice)
{
    pthread_once(&texts_once, build_texts);
    return texts.names[choice];
}

const char *cmd_broker_history_names(void)
{
    pthread_once(&texts_once, build_texts);
    return texts.history_names;
}

const char *cmd_brokers_built(void)
{
    pthread_once(&texts_once, build_texts);
    return texts.built;
}

const char *cmd_brokers_left_out(void)
{
    pthread_once(&texts_once, build_texts);
    return texts.left_out;
}
