/*
 * Settings of the `txo` subcommands (and of txo-fake-services, a program of its own that
 * shares this code). Each subcommand has ONE table listing every setting it takes: flag,
 * environment variable, type, default, help, whether it is a secret. The table generates `--help`,
 * `--print-config` (secrets shown as ***) and the parsing, so the three cannot drift apart.
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
    SETTING_I64,    /* target: int64_t *, within [min, max] (a count, shown as N) */
    SETTING_SIZE,   /* target: size_t *, within [min, max] (a count, shown as N) */
};

/*
 * One entry, written with designated initializers; fields left out are zero:
 *   {.name = "max-body", .env = "TXO_MAX_BODY_BYTES", .type = SETTING_UINT, .def = "65536",
 *    .help = "...", .min = 64, .max = 16777216, .target = &o->max_body}
 */
struct setting {
    const char *name; /* the flag without dashes: "batch-size" */
    const char *env;  /* environment variable: "TXO_BATCH_SIZE" (NULL: flag only) */
    enum setting_type type;
    const char *def; /* default as text (NULL: unset) */
    const char *help;
    bool secret;       /* shown as *** by --help and --print-config */
    bool hidden;       /* for tests only: accepted, but not in --help, man pages or docs */
    unsigned long min; /* the numeric types: the accepted range */
    unsigned long max;
    void *target; /* where the value goes; its type follows from .type */
    bool *given;  /* when not NULL: set to whether the environment or a flag gave the value */
};

struct settings_table;

/*
 * A subcommand, as command_run() runs it: add_settings builds its settings table; once its
 * settings are parsed and applied, run does the command's work.
 */
struct command {
    const char *name;        /* "relay" */
    const char *summary;     /* one line for `txo --help` */
    const char *usage;       /* "txo relay [options]" */
    const char *description; /* paragraphs for `txo relay --help` */
    /* Appends the command's settings, in --help order, with targets in its options. */
    void (*add_settings)(struct settings_table *t);
    /* The work; returns the exit status. A command takes positional arguments (options may
     * stand anywhere among them) when it has run_args instead of run. */
    int (*run)(void);
    int (*run_args)(int n_args, char **args);
    const char *program; /* a program of its own: its name for messages; NULL: `txo` */
    /* The EXAMPLES of its man page: one or more "# what it does\ncommand line\n" pairs. */
    const char *examples;
    /* The EXIT STATUS of its man page; NULL: 0 done, 1 failed, 2 bad option or usage. */
    const char *exit_status;
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

/*
 * Warns on stderr ("<me>: warning: TXO_X is not a txo setting (did you mean TXO_Y?)") about each
 * TXO_* variable of the environment that no command in cmds reads, naming the closest known
 * one. The project's scripts' and tests' own TXO_* variables are not reported (env_check.c).
 */
void settings_warn_unknown_env(const struct command *const *cmds, size_t n, const char *me);

/* While settings_warn_unknown_env() learns the names: takes the table's variable names and
 * returns true, and settings_parse() returns SETTINGS_EXIT_OK at once. False otherwise. */
bool settings_env_collect(const struct setting *table, size_t n);

/* Prints the help of cmd generated from its table. */
void settings_print_help(const struct command *cmd, const struct setting *table, size_t n,
                         FILE *out);

/* Writes the settings table as a Markdown section (used to generate docs/config.md). */
void settings_print_markdown(const struct command *cmd, const struct setting *table, size_t n,
                             FILE *out);

/*
 * Writes the settings table as a man page, txo-<name>(1) in roff (the man pages are generated
 * by `txo help --man`). version goes into the page's footer.
 */
void settings_print_man(const struct command *cmd, const struct setting *table, size_t n,
                        const char *version, FILE *out);

/*
 * Writes the environment variables of the table for txo.env(5), in roff: each with its help,
 * default and option; skip_common leaves out those of settings_add_common(), which
 * settings_print_common_env_vars() writes once. Returns how many it wrote.
 */
size_t settings_print_env_vars(const struct setting *table, size_t n, bool skip_common, FILE *out);
void settings_print_common_env_vars(FILE *out);

/* Writes text for roff: backslashes, minus signs and request-like line starts escaped. */
void settings_man_text(const char *text, FILE *out);

/*
 * A command's table under construction: entries appended in --help order, the shared groups
 * (settings_add_common() and the daemon groups of daemons.h) by a function each. The shared
 * groups are functions rather than macros so that each entry is a designated initializer in
 * a plain array, where every field is named.
 */
#define SETTINGS_MAX 256

struct settings_table {
    struct setting items[SETTINGS_MAX];
    size_t n;
    struct common_opts *common; /* set by settings_add_common(): applied after parsing */
};

/* Appends n entries. More than SETTINGS_MAX in all is a bug in the command: it aborts. */
void settings_add(struct settings_table *t, const struct setting *s, size_t n);

/* The longest database password common_apply() reads from a file, in bytes. */
#define COMMON_PASSWORD_MAX 1024

/* The settings every command that talks to the database shares. */
struct common_opts {
    struct txo_db_opts db;
    const char *ssl_mode; /* parsed into db.ssl_mode by common_apply() */
    const char *log_level;
    const char *log_format;
    const char *crash_point;   /* tests only (hidden) */
    const char *password_file; /* --mysql-password-file */
    bool password_given;       /* --mysql-password or MYSQL_PASSWORD was given */
    /* The password read from password_file or the systemd credential; db.password points
     * here then. */
    char password_buf[COMMON_PASSWORD_MAX + 1];
};

/* Appends the database, log level and crash point settings, with targets in o (o->db first set
 * to the library's defaults). */
void settings_add_common(struct settings_table *t, struct common_opts *o);

/*
 * Applies log level, TLS mode and crash point after parsing, and reads the database password
 * from --mysql-password-file, or else, when no password was given, from the systemd credential
 * $CREDENTIALS_DIRECTORY/mysql-password if there is one. Prints a message and returns false
 * when a value is invalid or the password file cannot be used (before any connection).
 */
bool common_apply(struct common_opts *o);

/*
 * Runs cmd with argv (argv[0] its name): builds its table, parses argv into it, applies the
 * common settings when the table has them (common_apply()), then calls cmd->run() or
 * cmd->run_args(). Returns their exit status, or 0 after --help or --print-config, 2 on a bad
 * setting (the message printed).
 */
int command_run(const struct command *cmd, int argc, char **argv);

/* Connects with o->db, printing a message naming the server on failure. */
struct txo_db *common_connect(const struct common_opts *o);

/* Prints "txo <cmd>: <what>: <err detail>" to stderr. */
void cmd_report(const char *cmd, const char *what, const struct txo_error *err);

/* Every subcommand. */
extern const struct command cmd_migrate;
extern const struct command cmd_relay;
extern const struct command cmd_replay;
extern const struct command cmd_partition;
extern const struct command cmd_demo;
extern const struct command cmd_serve;
extern const struct command cmd_worker;
extern const struct command cmd_up;
extern const struct command cmd_stats;
extern const struct command cmd_dlq;
extern const struct command cmd_saga;
extern const struct command cmd_audit;

#endif
