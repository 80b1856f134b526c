/*
 * `txo archive cat|verify`: reads back the files `txo clean --archive DIR` writes
 * (txo/archive.h has the format). No database: both work on the files alone, so an archive can
 * be checked and read on any machine it was copied to.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clean.h"
#include "cli_errors.h"
#include "txo/archive.h"

static int run(int n_args, char **args);

const struct command cmd_archive = {
    .name = "archive",
    .summary = "print or verify the archive files `txo clean --archive` writes",
    .usage = "txo archive cat FILE... | txo archive verify FILE|DIR...",
    .description =
        "cat FILE...: prints the rows of each archive file as JSON lines, one object per row\n"
        "with every column, without the header line; a file that does not verify is not\n"
        "printed. verify FILE|DIR...: checks each file, and every *.jsonl.gz file under each\n"
        "directory (an --archive DIR or one of its table directories): the gzip stream is\n"
        "whole, the first line is an archive header whose table and id range (the inbox's:\n"
        "sequence and first time) match the file's name, every row line is a JSON object with\n"
        "the header's columns, the ids ascend within the range (the inbox's rows: by\n"
        "processed_at, then event id, none twice), and the row count and CRC-32 are those of\n"
        "the header. Prints one line per bad file, then a summary.",
    .run_args = run,
    .examples = "# Check a whole archive, then restore its outbox rows with jq and mariadb:\n"
                "txo archive verify /var/lib/txo/archive\n"
                "txo archive cat /var/lib/txo/archive/outbox_events/*.jsonl.gz | jq -c .\n",
    .exit_status = "0 when every file was printed or verified, 1 when one is damaged, missing or "
                   "not an archive (a line each on standard output for verify, standard error "
                   "for cat), 2 on a bad option or usage.",
};

/* The paths to check, grown as directories are walked. */
struct path_list {
    char **items;
    size_t n, cap;
};

static bool list_add(struct path_list *l, const char *path)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **items = txo_realloc(l->items, cap * sizeof(*items));
        if (items == NULL)
            return false;
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n] = txo_strdup(path);
    if (l->items[l->n] == NULL)
        return false;
    l->n++;
    return true;
}

static void list_release(struct path_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        txo_free(l->items[i]);
    txo_free(l->items);
}

static int compare_paths(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool archive_name(const char *name)
{
    size_t n = strlen(name), s = strlen(".jsonl.gz");
    return name[0] != '.' && n > s && strcmp(name + n - s, ".jsonl.gz") == 0;
}

/* Adds the archive files of dir, and of its subdirectories down to depth levels. */
static bool walk(struct path_list *l, const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        printf("%s: cannot read the directory: %s\n", dir, strerror(errno));
        return false;
    }
    bool ok = true;
    const struct dirent *e;
    while (ok && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[PATH_MAX];
        struct stat st;
        int n = snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (n < 0 || (size_t)n >= sizeof(path) || stat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode) && depth > 0)
            ok = walk(l, path, depth - 1);
        else if (S_ISREG(st.st_mode) && archive_name(e->d_name))
            ok = list_add(l, path);
    }
    closedir(d);
    return ok;
}

static int verify(int n, char **args)
{
    struct path_list files = {0};
    int status = 0;
    for (int i = 0; i < n; i++) {
        struct stat st;
        bool ok;
        if (stat(args[i], &st) == 0 && S_ISDIR(st.st_mode))
            ok = walk(&files, args[i], 1);
        else
            ok = list_add(&files, args[i]);
        if (!ok)
            status = 1;
    }
    if (files.n > 1)
        qsort(files.items, files.n, sizeof(*files.items), compare_paths);
    size_t bad = 0, rows = 0;
    for (size_t i = 0; i < files.n; i++) {
        struct txo_archive_file f;
        struct txo_error err;
        txo_error_init(&err);
        if (txo_archive_read(files.items[i], &f, &err) < 0) {
            printf("%s\n", err.msg);
            bad++;
            continue;
        }
        rows += f.n_rows;
        txo_archive_file_release(&f);
    }
    printf("%zu files, %zu rows verified, %zu bad\n", files.n - bad, rows, bad);
    list_release(&files);
    return bad > 0 ? 1 : status;
}

static int cat(int n, char **args)
{
    int status = 0;
    for (int i = 0; i < n; i++) {
        struct txo_archive_file f;
        struct txo_error err;
        txo_error_init(&err);
        if (txo_archive_read(args[i], &f, &err) < 0) {
            cli_error("%s", err.msg);
            status = 1;
            continue;
        }
        if (fwrite(f.lines, 1, f.lines_len, stdout) != f.lines_len)
            status = 1;
        txo_archive_file_release(&f);
    }
    if (fflush(stdout) != 0)
        status = 1;
    return status;
}

static int run(int n_args, char **args)
{
    const char *action = n_args > 0 ? args[0] : NULL;
    bool has_args = n_args > 1;
    if (action != NULL && strcmp(action, "cat") == 0 && has_args)
        return cat(n_args - 1, args + 1);
    if (action != NULL && strcmp(action, "verify") == 0 && has_args)
        return verify(n_args - 1, args + 1);
    cli_error("usage: %s", cmd_archive.usage);
    return 2;
}
