#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testpipe.h"

int testpipe_run(const char *text, const char *before, const char *after, char *out,
                 size_t out_size)
{
    char path[] = "/tmp/txo_pipe_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        fail_msg("cannot create a file in /tmp");
    size_t len = strlen(text);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s %s %s", before, path, after);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        fail_msg("cannot run %s", cmd);
    size_t n = fread(out, 1, out_size - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    unlink(path);
    return status;
}
