/*
 * Settings of the `txo` subcommands. Each subcommand has ONE table listing every setting it
 * takes: flag, environment variable, type, default, help, whether it is a secret. The table
 * generates `--help`, `--print-config` (secrets shown as ***) and the parsing, so the three
 * cannot drift apart.
 *
 * Precedence, lowest first: default < environment variable < --flag.
 * Every value is validated at start-up; a bad one fails with one message naming the setting.
 * String values point into argv/environ or the static defaults: they live for the process.
 */
#ifndef TXO_CMD_SETTINGS_H
#define TXO_CMD_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "txo/txo.h"

enum setting_type {
    SETTING_STRING, /* target: const char ** */
    SETTING_UINT,   /* target: unsigned *, within [min, max] */
    SETTING_BOOL,   /* target: bool *; "--name" alone sets true; env/flag value 1/0/true/false */
    SETTING_MS,     /* target: int64_t *, milliseconds, within [min, max] */
};

struct setting {
    const char *name; /* the flag without dashes: "batch-size" */
    const char *env;  /* environment variable: "TXO_BATCH_SIZE" (NULL: flag only) */
    enum setting_type type;
    const char *def;  /* default as text (NULL: unset) */
    const char *help;
    bool secret;
    unsigned long min, max;
    void *target;
};

struct command {
    const char *name;        /* "relay" */
    const char *summary;     /* one line for `txo --help` */
    const char *usage;       /* "txo relay [options]" */
    const char *description; /* paragraphs for `txo relay --help` */
    int (*run)(int argc, char **argv);
    const char *program;     /* a program of its own: its name for messages; NULL: `txo` */
};

/* Outcome of settings_parse(). */
enum settings_result {
    SETTINGS_OK = 0,     /* run the command */
    SETTINGS_EXIT_OK,    /* --help or --print-config was printed: exit 0 */
    SETTINGS_EXIT_USAGE, /* an error was printed to stderr: exit 2 */
};

/*
 * Applies defaults, then the environment, then argv (getopt_long) to every target of the
 * table. Always understands --help and --print-config. Positional arguments are left in
 * argv[*first_arg .. argc) (first_arg may be NULL when the command takes none).
 */
enum settings_result settings_parse(const struct command *cmd, const struct setting *table,
                                    size_t n, int argc, char **argv, int *first_arg);

/* Prints the help of cmd generated from its table. */
void settings_print_help(const struct command *cmd, const struct setting *table, size_t n,
                         FILE *out);

/* Writes the settings table as a Markdown section (used to generate docs/config.md). */
void settings_print_markdown(const struct command *cmd, const struct setting *table, size_t n,
                             FILE *out);

/*
 * The settings every command that talks to the database shares, as table entries. `o` is a
 * struct common_opts.
 */
struct common_opts {
    struct txo_db_opts db;
    const char *log_level;
    const char *crash_point; /* tests only */
};

#define COMMON_SETTINGS(o)                                                                     \
    {"mysql-host", "MYSQL_HOST", SETTING_STRING, "127.0.0.1", "database server host", false,  \
     0, 0, &(o).db.host},                                                                      \
    {"mysql-port", "MYSQL_PORT", SETTING_UINT, "3306", "database server TCP port", false, 1,   \
     65535, &(o).db.port},                                                                     \
    {"mysql-socket", "MYSQL_SOCKET", SETTING_STRING, NULL,                                     \
     "unix socket path, used instead of host:port when set", false, 0, 0,                      \
     &(o).db.unix_socket},                                                                     \
    {"mysql-user", "MYSQL_USER", SETTING_STRING, "app", "database user", false, 0, 0,          \
     &(o).db.user},                                                                            \
    {"mysql-password", "MYSQL_PASSWORD", SETTING_STRING, "secret", "database password", true, \
     0, 0, &(o).db.password},                                                                  \
    {"mysql-database", "MYSQL_DATABASE", SETTING_STRING, "appdb", "database (schema) name",    \
     false, 0, 0, &(o).db.database},                                                           \
    {"connect-timeout", "TXO_CONNECT_TIMEOUT", SETTING_UINT, "5",                              \
     "database connect timeout, seconds", false, 1, 3600, &(o).db.connect_timeout_s},          \
    {"read-timeout", "TXO_READ_TIMEOUT", SETTING_UINT, "30",                                   \
     "database read timeout, seconds", false, 1, 86400, &(o).db.read_timeout_s},               \
    {"write-timeout", "TXO_WRITE_TIMEOUT", SETTING_UINT, "30",                                 \
     "database write timeout, seconds", false, 1, 86400, &(o).db.write_timeout_s},             \
    {"lock-wait-timeout", "TXO_LOCK_WAIT_TIMEOUT", SETTING_UINT, "10",                         \
     "innodb_lock_wait_timeout of each session, seconds", false, 1, 3600,                      \
     &(o).db.lock_wait_timeout_s},                                                             \
    {"tx-attempts", "TXO_TX_ATTEMPTS", SETTING_UINT, "5",                                      \
     "attempts of a transaction that hits a deadlock, lock wait timeout or lost connection",   \
     false, 1, 100, &(o).db.tx_max_attempts},                                                  \
    {"log-level", "TXO_LOG_LEVEL", SETTING_STRING, "info", "error, warn, info or debug",       \
     false, 0, 0, &(o).log_level},                                                             \
    {"crash-point", "TXO_CRASH_POINT", SETTING_STRING, NULL,                                   \
     "tests only: SIGKILL this process at the named point (NAME, or NAME:N to pass N times)",  \
     false, 0, 0,                                                                              \
     &(o).crash_point}

/* Applies log level and crash point after parsing. Prints a message and returns false when
 * a value is invalid. */
bool common_apply(const struct common_opts *o);

/* Connects with o->db, printing a message naming the server on failure. */
struct txo_db *common_connect(const struct common_opts *o);

/* Prints "txo <cmd>: <what>: <err detail>" to stderr. */
void cmd_report(const char *cmd, const char *what, const struct txo_error *err);

/* Installs SIGINT/SIGTERM handlers that call stop(arg) once; a second signal exits at once. */
void cmd_on_stop_signal(void (*stop)(void *arg), void *arg);

/* Every subcommand. */
extern const struct command cmd_migrate;
extern const struct command cmd_relay;
extern const struct command cmd_demo;
extern const struct command cmd_serve;
extern const struct command cmd_worker;
extern const struct command cmd_up;
extern const struct command cmd_stats;
extern const struct command cmd_dlq;
extern const struct command cmd_saga;

#endif
