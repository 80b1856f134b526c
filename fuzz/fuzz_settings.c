/*
 * libFuzzer harness of the settings parser of the `txo` command (cmd/txo/settings.c) with the
 * table of `txo serve`: the input is a command line, one argument per line. Every outcome
 * must be one of the three results, and an accepted command line must leave every number
 * within its setting's bounds. Run it with -close_fd_mask=3: usage errors and --help print.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemons.h"
#include "settings.h"

static void check(bool ok)
{
    if (!ok)
        __builtin_trap();
}

static struct {
    struct common_opts common;
    struct serve_settings serve;
} opts;

static struct settings_table table;

static int run(void)
{
    return 0;
}

static const struct command cmd = {.name = "serve",
                                   .summary = "fuzzed",
                                   .usage = "txo serve [options]",
                                   .description = "",
                                   .run = run};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { MAX_ARGS = 32 };
    char *text = malloc(size + 1);
    check(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    static char prog[] = "txo";
    char *argv[MAX_ARGS + 2] = {prog};
    int argc = 1;
    for (char *p = text; argc <= MAX_ARGS && p != NULL && *p != '\0';) {
        argv[argc++] = p;
        p = strchr(p, '\n');
        if (p != NULL)
            *p++ = '\0';
    }
    argv[argc] = NULL;
    optind = 0; /* getopt_long keeps state between calls: start over */
    memset(&opts, 0, sizeof(opts));
    if (table.n == 0) {
        settings_add_common(&table, &opts.common);
        settings_add_serve(&table, &opts.serve);
    }
    enum settings_result r = settings_parse(&cmd, table.items, table.n, argc, argv, NULL);
    check(r == SETTINGS_OK || r == SETTINGS_EXIT_OK || r == SETTINGS_EXIT_USAGE);
    if (r == SETTINGS_OK) {
        const struct txo_http_server_opts *http = &opts.serve.http;
        check(http->max_body_bytes >= 64 && http->max_body_bytes <= 16777216);
        check(http->header_timeout_s >= 1 && http->header_timeout_s <= 3600);
        check(http->max_connections >= 1 && http->max_connections <= 10000);
    }
    free(text);
    return 0;
}
