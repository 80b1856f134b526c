/* The table of brokers (brokers.h). */
#include "brokers.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* One line per broker, in the order --help lists them. */
static const struct cmd_broker *const brokers[] = {
    &cmd_broker_nats, &cmd_broker_kafka, &cmd_broker_redis, &cmd_broker_rabbitmq, &cmd_broker_grpc,
};

const struct cmd_broker *cmd_broker_find(const char *name)
{
    for (size_t i = 0; i < TXO_ARRAY_LEN(brokers); i++)
        if (name != NULL && strcmp(brokers[i]->name, name) == 0)
            return brokers[i];
    return NULL;
}

void cmd_brokers_add_settings(struct settings_table *t)
{
    for (size_t i = 0; i < TXO_ARRAY_LEN(brokers); i++)
        brokers[i]->add_settings(t);
}

void cmd_brokers_add_history_settings(struct settings_table *t)
{
    for (size_t i = 0; i < TXO_ARRAY_LEN(brokers); i++)
        if (brokers[i]->history_new != NULL)
            brokers[i]->add_settings(t);
}

void cmd_broker_shutdown(const struct cmd_broker *b)
{
    if (b != NULL && b->shutdown != NULL)
        b->shutdown();
}

/* The texts, built once from the table (pthread_once: the commands may ask from any thread). */
static struct {
    char names[2][256];
    char history_names[256];
    char help[3][1024];
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
    return which == WHICH_ALL || (which == WHICH_CONSUMERS && b->consumer_new != NULL) ||
           (which == WHICH_HISTORY && b->history_new != NULL);
}

/* Appends "a (A), b (B) or c (C)" (with_summary) or "a, b or c" to buf[used..size). */
static void list_brokers(char *buf, size_t size, enum which which, bool with_summary)
{
    size_t n = 0;
    for (size_t i = 0; i < TXO_ARRAY_LEN(brokers); i++)
        n += listed(brokers[i], which);
    size_t k = 0;
    for (size_t i = 0; i < TXO_ARRAY_LEN(brokers); i++) {
        if (!listed(brokers[i], which))
            continue;
        size_t used = strlen(buf);
        const char *sep = k == 0 ? "" : k + 1 == n ? " or " : ", ";
        if (with_summary)
            snprintf(buf + used, size - used, "%s%s (%s)", sep, brokers[i]->name,
                     brokers[i]->summary);
        else
            snprintf(buf + used, size - used, "%s%s", sep, brokers[i]->name);
        k++;
    }
}

static void build_texts(void)
{
    list_brokers(texts.names[0], sizeof(texts.names[0]), WHICH_ALL, false);
    list_brokers(texts.names[1], sizeof(texts.names[1]), WHICH_CONSUMERS, false);
    list_brokers(texts.history_names, sizeof(texts.history_names), WHICH_HISTORY, false);

    char *h = texts.help[CMD_BROKER_CHOICE_RELAY];
    size_t hs = sizeof(texts.help[0]);
    snprintf(h, hs,
             "where events go: log (JSON lines on stdout), null (discard), webhook (HTTP POST) "
             "or a broker: ");
    list_brokers(h, hs, WHICH_ALL, true);

    h = texts.help[CMD_BROKER_CHOICE_WORKER];
    snprintf(h, hs, "where OrderCreated comes from: none, or a broker: ");
    list_brokers(h, hs, WHICH_CONSUMERS, true);

    h = texts.help[CMD_BROKER_CHOICE_UP];
    snprintf(h, hs, "how events reach the worker: local (in-process dispatch), or a broker: ");
    list_brokers(h, hs, WHICH_CONSUMERS, true);
}

const char *cmd_broker_choice_help(enum cmd_broker_choice choice)
{
    pthread_once(&texts_once, build_texts);
    return texts.help[choice];
}

const char *cmd_broker_names(bool consumers)
{
    pthread_once(&texts_once, build_texts);
    return texts.names[consumers ? 1 : 0];
}

const char *cmd_broker_history_names(void)
{
    pthread_once(&texts_once, build_texts);
    return texts.history_names;
}
