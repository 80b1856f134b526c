/*
 * Test support: a command of the shell run over a text the test made (a log, a metrics page),
 * the way a test hands its output to another parser (node, jq, promtool) and reads the verdict.
 */
#ifndef TXO_TESTPIPE_H
#define TXO_TESTPIPE_H

#include <stddef.h>

/*
 * Writes text to a fresh file of its own, runs `before <path> after` through /bin/sh and reads
 * what it prints on stdout into out (at most out_size - 1 bytes, NUL-terminated); the file is
 * removed. Returns pclose()'s wait status. The test fails when the file or the pipe cannot be
 * made.
 */
int testpipe_run(const char *text, const char *before, const char *after, char *out,
                 size_t out_size);

#endif
