#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "testhttpclient.h"

void *testhttp_client_new(size_t size, const char *tag)
{
    struct testhttp_client *c = testdb_fixture_new(size, tag, TESTDB_NEW_EXPORT_ENV);
    c->h = curl_easy_init();
    assert_non_null(c->h);
    return c;
}

void testhttp_client_free(void *fixture)
{
    struct testhttp_client *c = fixture;
    if (c == NULL)
        return;
    testhttp_reply_release(&c->r);
    curl_easy_cleanup(c->h);
    testdb_fixture_free(c);
}
