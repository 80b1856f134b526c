/*
 * The settings tables of the `txo` subcommands: parsing (default < env < flag), --help,
 * --print-config and the Markdown reference, all generated from one table per command.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "settings.h"
#include "cli_errors.h"

#define OPT_HELP         1
#define OPT_PRINT_CONFIG 2
#define OPT_HELP_MD      3   /* --help-markdown: used by `txo help --markdown` for docs/config.md */
#define OPT_HELP_MAN     4   /* --help-man: used by `txo help --man` for the man pages */
#define OPT_HELP_ENV     5   /* --help-env: used by `txo help --man txo.env` for txo.env(5) */
#define OPT_FIRST        256 /* above every char getopt_long can return (h, ?, :) */

static bool parse_bool(const char *s, bool *out)
{
    static const char *yes[] = {"1", "true", "yes", "on"};
    static const char *no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < TXO_ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

static bool parse_ulong(const char *s, unsigned long min, unsigned long max, unsigned long *out)
{
    if (!*s || *s == '-' || *s == '+')
        return false;
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

static const char *type_hint(const struct setting *s)
{
    switch (s->type) {
    case SETTING_UINT:
    case SETTING_I64:
    case SETTING_SIZE:
        return "N";
    case SETTING_MS:
        return "MS";
    case SETTING_BOOL:
        return "";
    case SETTING_STRING:
        break;
    }
    return "VALUE";
}

/* The name messages start with: "txo relay", or the program's own name ("txo-fake-services"). */
static const char *who(const struct command *cmd, char *buf, size_t cap)
{
    if (cmd->program != NULL)
        return cmd->program;
    snprintf(buf, cap, "txo %s", cmd->name);
    return buf;
}

/* Stores text into the setting's target. `source` names where it came from for errors. */
static bool apply(const struct command *cmd, const struct setting *s, const char *text,
                  const char *source)
{
    unsigned long v;
    bool b;
    char name[64];
    switch (s->type) {
    case SETTING_STRING:
        *(const char **)s->target = text;
        return true;
    case SETTING_UINT:
    case SETTING_MS:
    case SETTING_I64:
    case SETTING_SIZE:
        if (!parse_ulong(text, s->min, s->max, &v)) {
            cli_error("%s: %s: --%s must be a whole number from %lu to %lu, got \"%s\"",
                      who(cmd, name, sizeof(name)), source, s->name, s->min, s->max, text);
            return false;
        }
        if (s->type == SETTING_UINT)
            *(unsigned *)s->target = (unsigned)v;
        else if (s->type == SETTING_SIZE)
            *(size_t *)s->target = (size_t)v;
        else
            *(int64_t *)s->target = (int64_t)v;
        return true;
    case SETTING_BOOL:
        if (!parse_bool(text, &b)) {
            cli_error("%s: %s: --%s must be true or false, got \"%s\"",
                      who(cmd, name, sizeof(name)), source, s->name, text);
            return false;
        }
        *(bool *)s->target = b;
        return true;
    }
    return false;
}

void settings_print_help(const struct command *cmd, const struct setting *table, size_t n,
                         FILE *out)
{
    fprintf(out, "Usage: %s\n\n%s\n\n%s\n\nOptions (flag, then environment variable):\n",
            cmd->usage, cmd->summary, cmd->description);
    for (size_t i = 0; i < n; i++) {
        const struct setting *s = &table[i];
        if (s->hidden)
            continue;
        char flag[64];
        const char *hint = type_hint(s);
        snprintf(flag, sizeof(flag), "--%s%s%s", s->name, *hint ? " " : "", hint);
        fprintf(out, "  %-28s %s", flag, s->help);
        if (s->def)
            fprintf(out, " (default: %s)", s->secret ? "***" : s->def);
        if (s->env)
            fprintf(out, " [%s]", s->env);
        fputc('\n', out);
    }
    fprintf(out, "  %-28s %s\n", "--print-config", "print the effective settings and exit");
    fprintf(out, "  %-28s %s\n", "-h, --help", "show this help and exit");
}

void settings_print_markdown(const struct command *cmd, const struct setting *table, size_t n,
                             FILE *out)
{
    fprintf(out,
            "## `%s`\n\n%s\n\n| flag | environment | default | meaning |\n"
            "|---|---|---|---|\n",
            cmd->usage, cmd->summary);
    for (size_t i = 0; i < n; i++) {
        const struct setting *s = &table[i];
        if (s->hidden)
            continue;
        const char *hint = type_hint(s);
        fprintf(out, "| `--%s%s%s` | %s%s%s | %s | %s |\n", s->name, *hint ? " " : "", hint,
                s->env ? "`" : "", s->env ? s->env : "-", s->env ? "`" : "",
                s->def ? (s->secret ? "***" : s->def) : "-", s->help);
    }
    fputc('\n', out);
}

void settings_man_text(const char *text, FILE *out)
{
    bool line_start = true;
    for (const char *p = text; *p != '\0'; p++) {
        if (line_start && (*p == '.' || *p == '\''))
            fputs("\\&", out); /* not a request */
        line_start = *p == '\n';
        if (*p == '\\')
            fputs("\\e", out);
        else if (*p == '-')
            fputs("\\-", out); /* a minus sign, so options copy and paste */
        else
            fputc(*p, out);
    }
}

static const char default_exit_status[] =
    "0 when it did what was asked, 1 when it failed (the reason on standard error), 2 on a bad "
    "option, environment variable or usage, found before anything is written.";

/* ENVIRONMENT: the variable of each setting, with its flag, and the environment file. */
static void print_man_environment(const struct setting *table, size_t n, FILE *out)
{
    fputs(".SH ENVIRONMENT\nEach variable sets the option named next to it (see OPTIONS); the "
          "option on the command line wins.\n.PD 0\n",
          out);
    for (size_t i = 0; i < n; i++) {
        const struct setting *s = &table[i];
        if (s->hidden || s->env == NULL)
            continue;
        fputs(".TP\n.B ", out);
        settings_man_text(s->env, out);
        fputs("\n\\fB\\-\\-", out);
        settings_man_text(s->name, out);
        fputs("\\fR\n", out);
    }
    fputs(".PD\n.PP\nThe systemd units read them from\n.IR /etc/txo/txo.env ,\nwhose format\n"
          ".BR txo.env (5)\ndescribes.\n",
          out);
}

/* EXAMPLES: "# what it does\ncommand line\n" pairs, each command line set in bold. */
static void print_man_examples(const char *examples, FILE *out)
{
    if (examples == NULL)
        return;
    fputs(".SH EXAMPLES\n", out);
    const char *p = examples;
    while (*p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        char line[512];
        snprintf(line, sizeof(line), "%.*s", (int)len, p);
        if (line[0] == '#') {
            fputs(".PP\n", out);
            settings_man_text(line[1] == ' ' ? line + 2 : line + 1, out);
            fputc('\n', out);
        } else if (line[0] != '\0') {
            fputs(".RS 4\n.nf\n\\fB", out);
            settings_man_text(line, out);
            fputs("\\fR\n.fi\n.RE\n", out);
        }
        p += len + (nl != NULL);
    }
}

/* True when env is a variable of settings_add_common(). */
static bool common_env(const char *env)
{
    struct settings_table t = {.n = 0};
    struct common_opts o;
    settings_add_common(&t, &o);
    for (size_t i = 0; i < t.n; i++)
        if (t.items[i].env != NULL && strcmp(t.items[i].env, env) == 0)
            return true;
    return false;
}
/* A setting's help as a man page sentence, then its default (*** for a secret). */
static void man_help_and_default(const struct setting *s, FILE *out)
{
    settings_man_text(s->help, out);
    size_t hl = strlen(s->help);
    if (hl > 0 && s->help[hl - 1] != '.')
        fputc('.', out);
    if (s->def != NULL) {
        fputs(" Default: ", out);
        settings_man_text(s->secret ? "***" : s->def, out);
        fputc('.', out);
    }
}

size_t settings_print_env_vars(const struct setting *table, size_t n, bool skip_common, FILE *out)
{
    size_t written = 0;
    for (size_t i = 0; i < n; i++) {
        const struct setting *s = &table[i];
        if (s->hidden || s->env == NULL || (skip_common && common_env(s->env)))
            continue;
        fputs(".TP\n.B ", out);
        settings_man_text(s->env, out);
        fputs("\n", out);
        man_help_and_default(s, out);
        fputs(" Option: \\fB\\-\\-", out);
        settings_man_text(s->name, out);
        fputs("\\fR.\n", out);
        written++;
    }
    return written;
}

void settings_print_common_env_vars(FILE *out)
{
    struct settings_table t = {.n = 0};
    struct common_opts o;
    settings_add_common(&t, &o);
    (void)settings_print_env_vars(t.items, t.n, false, out);
}

void settings_print_man(const struct command *cmd, const struct setting *table, size_t n,
                        const char *version, FILE *out)
{
    char title[64];
    size_t t = 0;
    for (const char *p = cmd->name; *p != '\0' && t + 1 < sizeof(title); p++)
        title[t++] = (char)toupper((unsigned char)*p);
    title[t] = '\0';
    fprintf(out, ".TH TXO\\-%s 1 \"\" \"txo %s\" \"txo manual\"\n.SH NAME\ntxo\\-", title, version);
    settings_man_text(cmd->name, out);
    fputs(" \\- ", out);
    settings_man_text(cmd->summary, out);
    fputs("\n.SH SYNOPSIS\n", out);
    /* "txo dlq list [options] | txo dlq replay [options] ID...": one line per form. */
    const char *form = cmd->usage;
    for (;;) {
        const char *bar = strstr(form, " | ");
        size_t len = bar != NULL ? (size_t)(bar - form) : strlen(form);
        char line[256];
        snprintf(line, sizeof(line), "%.*s", (int)len, form);
        fputs(".br\n", out);
        settings_man_text(line, out);
        fputc('\n', out);
        if (bar == NULL)
            break;
        form = bar + 3;
    }
    fputs(".SH DESCRIPTION\n", out);
    settings_man_text(cmd->description, out);
    fputs("\n.SH OPTIONS\nEach option is also an environment variable (shown after it); a flag "
          "overrides the variable, which overrides the default.\n",
          out);
    for (size_t i = 0; i < n; i++) {
        const struct setting *s = &table[i];
        if (s->hidden)
            continue;
        const char *hint = type_hint(s);
        fputs(".TP\n\\fB\\-\\-", out);
        settings_man_text(s->name, out);
        fputs("\\fR", out);
        if (*hint)
            fprintf(out, " \\fI%s\\fR", hint);
        fputc('\n', out);
        man_help_and_default(s, out);
        if (s->env != NULL) {
            fputs(" Environment: \\fB", out);
            settings_man_text(s->env, out);
            fputs("\\fR.", out);
        }
        fputc('\n', out);
    }
    fputs(".TP\n.B \\-\\-print\\-config\nprint the effective settings (secrets as ***) and "
          "exit.\n.TP\n.BR \\-h \", \" \\-\\-help\nshow the help and exit.\n",
          out);
    print_man_environment(table, n, out);
    fputs(".SH EXIT STATUS\n", out);
    settings_man_text(cmd->exit_status != NULL ? cmd->exit_status : default_exit_status, out);
    fputc('\n', out);
    print_man_examples(cmd->examples, out);
    fputs(".SH SEE ALSO\n.BR txo (1),\n.BR txo.env (5)\n", out);
}

static void print_config(const struct setting *table, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct setting *s = &table[i];
        if (s->hidden && s->type == SETTING_STRING && *(const char **)s->target == NULL)
            continue; /* a test's setting shows only when a test set it */
        printf("%s=", s->name);
        switch (s->type) {
        case SETTING_STRING: {
            const char *v = *(const char **)s->target;
            printf("%s\n", !v ? "" : s->secret ? "***" : v);
            break;
        }
        case SETTING_UINT:
            printf("%u\n", *(unsigned *)s->target);
            break;
        case SETTING_MS:
        case SETTING_I64:
            printf("%" PRId64 "\n", *(int64_t *)s->target);
            break;
        case SETTING_SIZE:
            printf("%zu\n", *(size_t *)s->target);
            break;
        case SETTING_BOOL:
            printf("%s\n", *(bool *)s->target ? "true" : "false");
            break;
        }
    }
}

enum settings_result settings_parse(const struct command *cmd, const struct setting *table,
                                    size_t n, int argc, char **argv, int *first_arg)
{
    if (settings_env_collect(table, n))
        return SETTINGS_EXIT_OK;
    char name[64];
    const char *me = who(cmd, name, sizeof(name));
    /* Defaults, then the environment. */
    for (size_t i = 0; i < n; i++) {
        const struct setting *s = &table[i];
        if (s->type == SETTING_STRING)
            *(const char **)s->target = NULL;
        if (s->given != NULL)
            *s->given = false;
        if (s->def && !apply(cmd, s, s->def, "default"))
            return SETTINGS_EXIT_USAGE; /* a bug in the table; reported like bad input */
        const char *env = s->env ? getenv(s->env) : NULL;
        if (env && *env) {
            char source[96];
            snprintf(source, sizeof(source), "environment variable %s", s->env);
            if (!apply(cmd, s, env, source))
                return SETTINGS_EXIT_USAGE;
            if (s->given != NULL)
                *s->given = true;
        }
    }

    struct option *longopts = calloc(n + 6, sizeof(*longopts));
    if (!longopts) {
        cli_error("%s: out of memory", me);
        return SETTINGS_EXIT_USAGE;
    }
    for (size_t i = 0; i < n; i++) {
        longopts[i].name = table[i].name;
        longopts[i].has_arg = table[i].type == SETTING_BOOL ? optional_argument : required_argument;
        longopts[i].val = OPT_FIRST + (int)i;
    }
    longopts[n] = (struct option){"help", no_argument, NULL, OPT_HELP};
    longopts[n + 1] = (struct option){"print-config", no_argument, NULL, OPT_PRINT_CONFIG};
    longopts[n + 2] = (struct option){"help-markdown", no_argument, NULL, OPT_HELP_MD};
    longopts[n + 3] = (struct option){"help-man", no_argument, NULL, OPT_HELP_MAN};
    longopts[n + 4] = (struct option){"help-env", no_argument, NULL, OPT_HELP_ENV};

    enum settings_result result = SETTINGS_OK;
    bool want_print = false;
    optind = 1;
    opterr = 0;
    for (;;) {
        /* Commands with positional arguments ("dlq list", "saga show ID") take their
         * options anywhere (GNU permutation moves the positionals to the end); the others
         * stop at the first non-option, which is then reported as unexpected. */
        int c = getopt_long(argc, argv, first_arg ? "h" : "+h", longopts, NULL);
        if (c == -1)
            break;
        if (c == 'h' || c == OPT_HELP) {
            settings_print_help(cmd, table, n, stdout);
            result = SETTINGS_EXIT_OK;
            goto out;
        }
        if (c == OPT_HELP_MD) {
            settings_print_markdown(cmd, table, n, stdout);
            result = SETTINGS_EXIT_OK;
            goto out;
        }
        if (c == OPT_HELP_MAN) {
            settings_print_man(cmd, table, n, TXO_VERSION, stdout);
            result = SETTINGS_EXIT_OK;
            goto out;
        }
        if (c == OPT_HELP_ENV) {
            fputs(".SS txo ", stdout);
            settings_man_text(cmd->name, stdout);
            fputc('\n', stdout);
            if (settings_print_env_vars(table, n, true, stdout) == 0)
                fputs("Only the variables common to every command.\n", stdout);
            result = SETTINGS_EXIT_OK;
            goto out;
        }
        if (c == OPT_PRINT_CONFIG) {
            want_print = true;
            continue;
        }
        if (c >= OPT_FIRST && c < OPT_FIRST + (int)n) {
            const struct setting *s = &table[c - OPT_FIRST];
            const char *value = optarg;
            if (s->type == SETTING_BOOL && !value)
                value = "true";
            if (!apply(cmd, s, value, "command line")) {
                result = SETTINGS_EXIT_USAGE;
                goto out;
            }
            if (s->given != NULL)
                *s->given = true;
            continue;
        }
        if (c == ':' || (c == '?' && optopt >= OPT_FIRST))
            cli_error("%s: option %s needs a value", me, argv[optind - 1]);
        else
            cli_error("%s: unknown option %s (see %s --help)", me, argv[optind - 1], me);
        result = SETTINGS_EXIT_USAGE;
        goto out;
    }
    if (optind < argc && !first_arg) {
        cli_error("%s: unexpected argument \"%s\" (see %s --help)", me, argv[optind], me);
        result = SETTINGS_EXIT_USAGE;
        goto out;
    }
    if (first_arg)
        *first_arg = optind;
    if (want_print) {
        print_config(table, n);
        result = SETTINGS_EXIT_OK;
    }
out:
    free(longopts);
    return result;
}

void settings_add(struct settings_table *t, const struct setting *s, size_t n)
{
    if (n > SETTINGS_MAX - t->n) {
        cli_error("txo: bug: more than %d settings in one command", SETTINGS_MAX);
        abort();
    }
    memcpy(&t->items[t->n], s, n * sizeof(*s));
    t->n += n;
}

void settings_add_common(struct settings_table *t, struct common_opts *o)
{
    txo_db_opts_init(&o->db);
    t->common = o;
    const struct setting group[] = {
        {.name = "mysql-host",
         .env = "MYSQL_HOST",
         .type = SETTING_STRING,
         .def = "127.0.0.1",
         .help = "database server host, or a comma-separated list HOST[:PORT],... (the nodes of "
                 "a Galera cluster) tried in order on connect, skipping nodes that are down or "
                 "outside the primary component",
         .target = &o->db.host},
        {.name = "mysql-port",
         .env = "MYSQL_PORT",
         .type = SETTING_UINT,
         .def = "3306",
         .help = "database server TCP port",
         .min = 1,
         .max = 65535,
         .target = &o->db.port},
        {.name = "mysql-socket",
         .env = "MYSQL_SOCKET",
         .type = SETTING_STRING,
         .help = "unix socket path, used instead of host:port when set",
         .target = &o->db.unix_socket},
        {.name = "mysql-user",
         .env = "MYSQL_USER",
         .type = SETTING_STRING,
         .def = "app",
         .help = "database user",
         .target = &o->db.user},
        {.name = "mysql-password",
         .env = "MYSQL_PASSWORD",
         .type = SETTING_STRING,
         .def = "secret",
         .help = "database password",
         .secret = true,
         .target = &o->db.password,
         .given = &o->password_given},
        {.name = "mysql-password-file",
         .env = "MYSQL_PASSWORD_FILE",
         .type = SETTING_STRING,
         .help = "file whose content is the database password (one trailing newline dropped), "
                 "instead of --mysql-password: giving both is an error. Neither given: the "
                 "systemd credential mysql-password ($CREDENTIALS_DIRECTORY/mysql-password) if "
                 "there is one",
         .target = &o->password_file},
        {.name = "mysql-database",
         .env = "MYSQL_DATABASE",
         .type = SETTING_STRING,
         .def = "appdb",
         .help = "database (schema) name",
         .target = &o->db.database},
        {.name = "mysql-ssl-mode",
         .env = "MYSQL_SSL_MODE",
         .type = SETTING_STRING,
         .def = "preferred",
         .help = "TLS to the database: disabled, preferred (TLS when the server offers it), "
                 "required, verify-ca or verify-identity (use this one in production)",
         .target = &o->ssl_mode},
        {.name = "mysql-ssl-ca",
         .env = "MYSQL_SSL_CA",
         .type = SETTING_STRING,
         .help = "PEM file of the CA that signed the server certificate (verify-ca, "
                 "verify-identity)",
         .target = &o->db.ssl_ca},
        {.name = "mysql-ssl-cert",
         .env = "MYSQL_SSL_CERT",
         .type = SETTING_STRING,
         .help = "PEM file of the client certificate, for users that REQUIRE X509",
         .target = &o->db.ssl_cert},
        {.name = "mysql-ssl-key",
         .env = "MYSQL_SSL_KEY",
         .type = SETTING_STRING,
         .help = "PEM file of the client certificate's private key",
         .target = &o->db.ssl_key},
        {.name = "connect-timeout",
         .env = "TXO_CONNECT_TIMEOUT",
         .type = SETTING_UINT,
         .def = "5",
         .help = "database connect timeout, seconds",
         .min = 1,
         .max = 3600,
         .target = &o->db.connect_timeout_s},
        {.name = "read-timeout",
         .env = "TXO_READ_TIMEOUT",
         .type = SETTING_UINT,
         .def = "30",
         .help = "database read timeout, seconds",
         .min = 1,
         .max = 86400,
         .target = &o->db.read_timeout_s},
        {.name = "write-timeout",
         .env = "TXO_WRITE_TIMEOUT",
         .type = SETTING_UINT,
         .def = "30",
         .help = "database write timeout, seconds",
         .min = 1,
         .max = 86400,
         .target = &o->db.write_timeout_s},
        {.name = "lock-wait-timeout",
         .env = "TXO_LOCK_WAIT_TIMEOUT",
         .type = SETTING_UINT,
         .def = "10",
         .help = "innodb_lock_wait_timeout of each session, seconds",
         .min = 1,
         .max = 3600,
         .target = &o->db.lock_wait_timeout_s},
        {.name = "tx-attempts",
         .env = "TXO_TX_ATTEMPTS",
         .type = SETTING_UINT,
         .def = "5",
         .help =
             "attempts of a transaction that hits a deadlock, lock wait timeout or lost connection",
         .min = 1,
         .max = 100,
         .target = &o->db.tx_max_attempts},
        {.name = "log-level",
         .env = "TXO_LOG_LEVEL",
         .type = SETTING_STRING,
         .def = "info",
         .help = "error, warn, info or debug",
         .target = &o->log_level},
        {.name = "log-format",
         .env = "TXO_LOG_FORMAT",
         .type = SETTING_STRING,
         .def = "logfmt",
         .help = "stderr log lines: logfmt (key=value) or json (one object per line)",
         .target = &o->log_format},
        {.name = "crash-point",
         .env = "TXO_CRASH_POINT",
         .type = SETTING_STRING,
         .hidden = true,
         .help = "tests only: SIGKILL this process at the named point (NAME, or NAME:N to pass N "
                 "times)",
         .target = &o->crash_point},
    };
    settings_add(t, group, TXO_ARRAY_LEN(group));
}

static void wipe(char *buf, size_t len)
{
    volatile char *p = buf;
    for (size_t i = 0; i < len; i++)
        p[i] = '\0';
}

/*
 * Reads the password in the file at path into o->password_buf and points o->db.password at
 * it: the file's content without one trailing newline. what names the source in messages. An
 * unreadable or empty file, one longer than COMMON_PASSWORD_MAX bytes or one with a NUL byte
 * is an error, printed; the buffer is wiped then.
 */
static bool password_read(struct common_opts *o, const char *path, const char *what)
{
    char *buf = o->password_buf;
    const char *problem = NULL;
    /* read(2), not stdio: no copy of the password is left behind in a FILE's buffer. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        cli_error("txo: %s %s: cannot open it: %s", what, path, strerror(errno));
        return false;
    }
    /* One byte more than the longest password tells a longer file apart. */
    size_t len = 0;
    int read_errno = 0;
    while (len < sizeof(o->password_buf)) {
        ssize_t n = read(fd, buf + len, sizeof(o->password_buf) - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            read_errno = errno;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    if (read_errno != 0) {
        cli_error("txo: %s %s: cannot read it: %s", what, path, strerror(read_errno));
        goto fail;
    }
    if (len == sizeof(o->password_buf)) {
        cli_error("txo: %s %s is longer than %d bytes", what, path, COMMON_PASSWORD_MAX);
        goto fail;
    }
    if (memchr(buf, '\0', len) != NULL)
        problem = "holds a NUL byte";
    if (problem == NULL && len > 0 && buf[len - 1] == '\n')
        len--;
    if (problem == NULL && len == 0)
        problem = "is empty";
    if (problem != NULL) {
        cli_error("txo: %s %s %s", what, path, problem);
        goto fail;
    }
    buf[len] = '\0';
    o->db.password = buf;
    return true;
fail:
    wipe(buf, sizeof(o->password_buf));
    return false;
}

/* --mysql-password-file, else the systemd credential when no password was given. */
static bool password_load(struct common_opts *o)
{
    if (o->password_file != NULL && o->password_file[0] != '\0') {
        if (o->password_given) {
            cli_error("txo: --mysql-password-file (MYSQL_PASSWORD_FILE) and "
                      "--mysql-password (MYSQL_PASSWORD) both give the database "
                      "password: give one");
            return false;
        }
        return password_read(o, o->password_file, "--mysql-password-file");
    }
    const char *dir = getenv("CREDENTIALS_DIRECTORY");
    if (o->password_given || dir == NULL || dir[0] == '\0')
        return true;
    char path[4096];
    int n = snprintf(path, sizeof(path), "%s/mysql-password", dir);
    if (n < 0 || (size_t)n >= sizeof(path) || access(path, F_OK) != 0)
        return true; /* no such credential: the default password */
    return password_read(o, path, "systemd credential");
}

bool common_apply(struct common_opts *o)
{
    enum txo_log_level level;
    if (txo_log_level_parse(o->log_level, &level) < 0) {
        cli_error("txo: --log-level must be error, warn, info or debug, got \"%s\"", o->log_level);
        return false;
    }
    txo_log_set_level(level);
    enum txo_log_format format;
    if (txo_log_format_parse(o->log_format, &format) < 0) {
        cli_error("txo: --log-format must be logfmt or json, got \"%s\"", o->log_format);
        return false;
    }
    txo_log_set_format(format);
    struct txo_db_opts *db = &o->db;
    if (txo_db_ssl_mode_parse(o->ssl_mode, &db->ssl_mode) < 0) {
        cli_error("txo: --mysql-ssl-mode must be disabled, preferred, required, verify-ca or "
                  "verify-identity, got \"%s\"",
                  o->ssl_mode ? o->ssl_mode : "");
        return false;
    }
    if (db->ssl_mode >= TXO_SSL_VERIFY_CA && !(db->ssl_ca && *db->ssl_ca)) {
        cli_error("txo: --mysql-ssl-mode %s needs --mysql-ssl-ca (MYSQL_SSL_CA)", o->ssl_mode);
        return false;
    }
    if (!(db->ssl_cert && *db->ssl_cert) != !(db->ssl_key && *db->ssl_key)) {
        cli_error("txo: --mysql-ssl-cert and --mysql-ssl-key go together");
        return false;
    }
    if (o->crash_point && *o->crash_point) {
        /* "name" crashes on the first pass, "name:N" lets N passes through first. */
        char name[128];
        unsigned after = 0;
        const char *colon = strchr(o->crash_point, ':');
        size_t len = colon ? (size_t)(colon - o->crash_point) : strlen(o->crash_point);
        char *end = NULL;
        if (colon) {
            unsigned long n = strtoul(colon + 1, &end, 10);
            if (end == colon + 1 || *end != '\0' || n > 1000000) {
                cli_error("txo: --crash-point must be NAME or NAME:N, got \"%s\"", o->crash_point);
                return false;
            }
            after = (unsigned)n;
        }
        if (len == 0 || len >= sizeof(name)) {
            cli_error("txo: --crash-point name is empty or too long");
            return false;
        }
        memcpy(name, o->crash_point, len);
        name[len] = '\0';
        txo_crash_point_set(name, after);
    }
    return password_load(o);
}

int command_run(const struct command *cmd, int argc, char **argv)
{
    struct settings_table table = {.n = 0};
    if (cmd->add_settings != NULL)
        cmd->add_settings(&table);
    int first = argc;
    enum settings_result r = settings_parse(cmd, table.items, table.n, argc, argv,
                                            cmd->run_args != NULL ? &first : NULL);
    if (r != SETTINGS_OK)
        return r == SETTINGS_EXIT_OK ? 0 : 2;
    if (table.common != NULL && !common_apply(table.common))
        return 2;
    return cmd->run_args != NULL ? cmd->run_args(argc - first, argv + first) : cmd->run();
}

struct txo_db *common_connect(const struct common_opts *o)
{
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_open(&o->db, &db, &err) < 0) {
        cli_error("txo: %s", err.msg);
        return NULL;
    }
    return db;
}

void cmd_report(const char *cmd, const char *what, const struct txo_error *err)
{
    cli_error("txo %s: %s: %s (%s)", cmd, what, err->msg[0] ? err->msg : "failed",
              txo_err_name(err->code));
}
