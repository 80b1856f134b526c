#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "testrelayfix.h"

void *testrelay_fixture_new(size_t size, const char *tag, const char *name)
{
    struct testrelay_fixture *f = testdb_fixture_new(size, tag, 0);
    testrelay_file_open(&f->out, name);
    return f;
}

void testrelay_fixture_free(void *fixture)
{
    struct testrelay_fixture *f = fixture;
    if (f == NULL)
        return;
    testrelay_file_close(&f->out);
    testdb_fixture_free(f);
}

int testrelay_fixture_free_state(void **state)
{
    testrelay_fixture_free(*state);
    *state = NULL;
    return 0;
}
