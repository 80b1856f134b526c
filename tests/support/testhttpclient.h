/*
 * Test support: the per-test fixture of a test that talks to txo daemons over HTTP: the test's
 * database, exported to the daemons it starts (TESTDB_NEW_EXPORT_ENV), a CURL handle and the
 * reply the requests fill (testhttp.h). The daemons themselves are the test's own.
 */
#ifndef TXO_TESTHTTPCLIENT_H
#define TXO_TESTHTTPCLIENT_H

#include <stddef.h>

#include <curl/curl.h>

#include "testdb.h"
#include "testhttp.h"

struct testhttp_client {
    struct testdb t; /* first, as testdb_fixture_new() wants */
    CURL *h;
    struct testhttp_reply r;
};

/*
 * A test's fixture struct of size bytes whose first member is a struct testhttp_client:
 * testdb_fixture_new(size, tag, TESTDB_NEW_EXPORT_ENV), then its CURL handle made (the test
 * fails when it cannot be). The caller owns it and frees it with testhttp_client_free().
 */
void *testhttp_client_new(size_t size, const char *tag);

/* Releases the reply and the CURL handle, then testdb_fixture_free(). NULL is a no-op. */
void testhttp_client_free(void *fixture);

#endif
