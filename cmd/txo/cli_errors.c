/*
 * Command-line and settings errors of the txo programs (cli_errors.h): plain text for a
 * person, or one log line through TXO_LOG once a log format was chosen.
 */
#include "cli_errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool structured;

void cli_errors_init(int argc, char *const *argv)
{
    const char *value = NULL;
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strncmp(argv[i], "--log-format=", 13) == 0)
            value = argv[i] + 13;
        else if (strcmp(argv[i], "--log-format") == 0 && i + 1 < argc)
            value = argv[i + 1];
    }
    if (value == NULL) {
        const char *env = getenv("TXO_LOG_FORMAT");
        if (env != NULL && *env != '\0')
            value = env;
    }
    enum txo_log_format format;
    structured = value != NULL && txo_log_format_parse(value, &format) == 0;
    if (structured)
        txo_log_set_format(format);
}

bool cli_errors_structured(void)
{
    return structured;
}

void cli_error(const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (structured)
        TXO_LOG(TXO_LOG_ERROR, "cli", "cannot run", TXO_KV_STR("error", text));
    else
        fprintf(stderr, "%s\n", text);
}

void cli_warn_unknown_env(const char *me, const char *name, size_t name_len, const char *hint)
{
    if (structured)
        TXO_LOG(TXO_LOG_WARN, "cli", "not a txo setting; ignored", TXO_KV_STR("command", me),
                TXO_KV_STRN("variable", name, name_len), TXO_KV_STR("did_you_mean", hint));
    else if (hint != NULL)
        fprintf(stderr, "%s: warning: %.*s is not a txo setting (did you mean %s?); ignored\n", me,
                (int)name_len, name, hint);
    else
        fprintf(stderr, "%s: warning: %.*s is not a txo setting; ignored\n", me, (int)name_len,
                name);
}
