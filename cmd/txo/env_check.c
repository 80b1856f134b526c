/*
 * The environment check of every txo command: a TXO_* variable that no command reads is a
 * setting misspelt or left over from another version, and would otherwise be ignored without
 * a word. The names every command reads are learnt from the commands' own settings tables
 * (each command's run() is called in collect mode, where settings_parse() hands its table here
 * and returns at once), so the check cannot drift from the tables; they are learnt only when
 * the environment holds a TXO_* variable that is not one of the scripts' own.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "settings.h"
#include "cli_errors.h"

extern char **environ;

/* Read by the project's scripts and tests (make run, the test suites), never by txo. */
static const char *const tooling_names[] = {
    "TXO_BIN",
    "TXO_BENCH",
    "TXO_DB_DIR",
    "TXO_DB_EXTRA_ARGS",
    "TXO_DB_PORT",
    "TXO_DB_PRIVATE",
    "TXO_DB_SOCKET",
    "TXO_GALERA_PROVIDER",
    "TXO_HINT_CMD",
    "TXO_JS_DIR",
    "TXO_KCAT",
    "TXO_NATS_PORT",
    "TXO_NATS_SERVER",
    "TXO_OPENSSL",
    "TXO_PARTITION_TEST_ROWS",
    "TXO_PROTOC",
    "TXO_PYTHON",
    "TXO_RABBITMQ_SERVER",
    "TXO_REDIS_CLI",
    "TXO_REDIS_SERVER",
};
static const char *const tooling_prefixes[] = {"TXO_TEST_", "TXO_CLUSTER_", "TXO_FAKE_"};

enum { KNOWN_MAX = 512, NAME_MAX_LEN = 64 };

static struct {
    bool on;
    size_t n;
    const char *names[KNOWN_MAX];
} known;

bool settings_env_collect(const struct setting *table, size_t n)
{
    if (!known.on)
        return false;
    for (size_t i = 0; i < n && known.n < KNOWN_MAX; i++)
        if (table[i].env != NULL)
            known.names[known.n++] = table[i].env;
    return true;
}

static bool is_known(const char *name, size_t len)
{
    for (size_t i = 0; i < known.n; i++)
        if (strlen(known.names[i]) == len && memcmp(known.names[i], name, len) == 0)
            return true;
    for (size_t i = 0; i < sizeof(tooling_names) / sizeof(tooling_names[0]); i++)
        if (strlen(tooling_names[i]) == len && memcmp(tooling_names[i], name, len) == 0)
            return true;
    for (size_t i = 0; i < sizeof(tooling_prefixes) / sizeof(tooling_prefixes[0]); i++)
        if (strncmp(name, tooling_prefixes[i], strlen(tooling_prefixes[i])) == 0)
            return true;
    return false;
}

/* Levenshtein distance of a[0..la) and b[0..lb), both at most NAME_MAX_LEN bytes. */
static size_t distance(const char *a, size_t la, const char *b, size_t lb)
{
    size_t row[NAME_MAX_LEN + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The known name closest to name, or NULL when none is close enough to be a misspelling. */
static const char *closest(const char *name, size_t len)
{
    const char *best = NULL;
    size_t best_d = len / 3 > 2 ? len / 3 : 2; /* more than that is another name */
    best_d++;
    for (size_t i = 0; i < known.n; i++) {
        size_t kl = strlen(known.names[i]);
        if (kl > NAME_MAX_LEN)
            continue;
        size_t d = distance(name, len, known.names[i], kl);
        if (d < best_d) {
            best_d = d;
            best = known.names[i];
        }
    }
    return best;
}

/* Learns the names every command reads, from their tables (once). */
static void learn(const struct command *const *cmds, size_t n)
{
    known.on = true;
    known.n = 0;
    for (size_t i = 0; i < n; i++) {
        char *argv[] = {(char *)cmds[i]->name, NULL};
        (void)command_run(cmds[i], 1, argv);
    }
    known.on = false;
}

void settings_warn_unknown_env(const struct command *const *cmds, size_t n, const char *me)
{
    bool learnt = false;
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "TXO_", 4) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        size_t len = eq != NULL ? (size_t)(eq - *e) : strlen(*e);
        if (!learnt && !is_known(*e, len)) { /* the tables only when there is a TXO_* to judge */
            learn(cmds, n);
            learnt = true;
        }
        if (is_known(*e, len))
            continue;
        const char *hint = len <= NAME_MAX_LEN ? closest(*e, len) : NULL;
        cli_warn_unknown_env(me, *e, len, hint);
    }
}
