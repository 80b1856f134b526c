/*
 * Unit tests for src/trace/trace.c against the W3C Trace Context specification: the
 * specification's own traceparent example, every way a traceparent is invalid (version ff,
 * upper-case hex, all-zero ids, wrong lengths and separators), higher versions read as far
 * as version 00 goes, blanks around the value; tracestate members, blanks and empty members,
 * the key and value grammar, 32 members, duplicate keys, and the cut of a long one; new ids
 * (never zero, distinct) and child spans.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "txo/trace.h"

#define EXAMPLE "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static void test_example_round_trips(void **state)
{
    (void)state;
    struct txo_trace_ctx c;
    assert_true(txo_trace_parse(EXAMPLE, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", &c));
    assert_int_equal(c.flags, TXO_TRACE_SAMPLED);
    assert_int_equal(c.trace_id[0], 0x4b);
    assert_int_equal(c.span_id[7], 0xb7);
    assert_string_equal(c.state, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
    char out[TXO_TRACEPARENT_LEN + 1];
    txo_trace_format(&c, out);
    assert_string_equal(out, EXAMPLE);
    char tid[33], sid[17];
    txo_trace_id_hex(&c, tid);
    txo_trace_span_hex(&c, sid);
    assert_string_equal(tid, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_string_equal(sid, "00f067aa0ba902b7");
}

static void test_invalid_traceparents(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "00",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  /* version ff */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  /* upper case */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",  /* upper case */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  /* zero trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  /* zero span id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", /* 00 is 55 bytes */
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",   /* short trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",   /* short span id */
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  /* separator */
        "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",  /* flags not hex */
        "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  /* version not hex */
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", /* later: '-' or end */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct txo_trace_ctx c;
        memset(&c, 0x5a, sizeof(c));
        if (txo_trace_parse(bad[i], NULL, &c))
            fail_msg("accepted: \"%s\"", bad[i]);
        assert_int_equal(c.flags, 0x5a); /* untouched */
    }
    struct txo_trace_ctx c;
    assert_false(txo_trace_parse(NULL, "a=b", &c));
}

static void test_later_versions_and_blanks(void **state)
{
    (void)state;
    struct txo_trace_ctx c;
    /* A later version with more fields: read as version 00, only the sampled flag kept. */
    assert_true(txo_trace_parse(
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff-what-comes", NULL, &c));
    assert_int_equal(c.flags, TXO_TRACE_SAMPLED);
    char out[TXO_TRACEPARENT_LEN + 1];
    txo_trace_format(&c, out);
    assert_string_equal(out, EXAMPLE);
    assert_true(
        txo_trace_parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", NULL, &c));
    assert_int_equal(c.flags, 0);
    /* HTTP's optional blanks around a header value. */
    assert_true(txo_trace_parse(" \t" EXAMPLE "  ", NULL, &c));
    assert_string_equal(c.state, "");
}

static void expect_state(const char *in, const char *want)
{
    struct txo_trace_ctx c;
    assert_true(txo_trace_parse(EXAMPLE, in, &c));
    if (strcmp(c.state, want) != 0)
        fail_msg("tracestate \"%s\": got \"%s\", want \"%s\"", in != NULL ? in : "(none)", c.state,
                 want);
}

static void test_tracestate(void **state)
{
    (void)state;
    expect_state(NULL, "");
    expect_state("", "");
    expect_state("  rojo=1 ,, \t congo=2  ,", "rojo=1,congo=2");
    expect_state("tenant@vendor=x", "tenant@vendor=x");
    expect_state("0tenant@vendor=x", "0tenant@vendor=x");
    expect_state("a_b-c*d/e=v a l", "a_b-c*d/e=v a l");
    /* One bad member drops the whole list. */
    expect_state("rojo=1,Congo=2", "");   /* upper-case key */
    expect_state("rojo=1,0congo=2", "");  /* simple key starts with a letter */
    expect_state("rojo=1,congo", "");     /* no '=' */
    expect_state("rojo=1,congo=", "");    /* empty value */
    expect_state("rojo=1,congo=a=b", ""); /* '=' in the value */
    expect_state("rojo=1,congo=trailing ", "rojo=1,congo=trailing"); /* blanks are OWS */
    expect_state("rojo=1,tenant@Vendor=x", "");                      /* system id lower case */
    expect_state("rojo=1,tenant@vendor_is_too_long=x", "");          /* system id <= 14 */
    expect_state("rojo=1,rojo=2", "");                               /* a key appears once */
    expect_state("rojo=\x7f", "");                                   /* outside printable ASCII */

    char many[33 * 8 + 1] = "";
    for (int i = 0; i < 32; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%sk%02d=v", i ? "," : "", i);
    struct txo_trace_ctx c;
    assert_true(txo_trace_parse(EXAMPLE, many, &c));
    assert_string_equal(c.state, many); /* 32 members: kept */
    strcat(many, ",k32=v");
    expect_state(many, ""); /* 33: dropped */
}

static void test_long_tracestate_is_cut(void **state)
{
    (void)state;
    /* 200-byte members first, then the last ones, until it fits in 512 bytes. */
    char big[201];
    memset(big, 'x', 200);
    big[200] = '\0';
    big[0] = 'b';
    big[1] = '=';
    char in[2048];
    snprintf(in, sizeof(in), "a1=%0100d,%s,a2=%0100d,a3=%0100d,a4=%0100d,a5=%0100d", 1, big, 2, 3,
             4, 5);
    struct txo_trace_ctx c;
    assert_true(txo_trace_parse(EXAMPLE, in, &c));
    /* Without b: 5 x 103 + 4 = 519 > 512, so a5 went too; 4 x 103 + 3 = 415. */
    assert_int_equal(strlen(c.state), 415);
    assert_null(strstr(c.state, "b=x"));
    assert_null(strstr(c.state, "a5="));
    assert_non_null(strstr(c.state, "a4="));
    assert_memory_equal(c.state, "a1=", 3);
}

static void test_new_ids(void **state)
{
    (void)state;
    struct txo_trace_ctx a, b, child;
    txo_trace_new_root(true, &a);
    txo_trace_new_root(false, &b);
    assert_int_equal(a.flags, TXO_TRACE_SAMPLED);
    assert_int_equal(b.flags, 0);
    assert_memory_not_equal(a.trace_id, b.trace_id, sizeof(a.trace_id));
    char text[TXO_TRACEPARENT_LEN + 1];
    txo_trace_format(&a, text);
    struct txo_trace_ctx back;
    assert_true(txo_trace_parse(text, NULL, &back)); /* what we send, we accept */
    assert_memory_equal(back.trace_id, a.trace_id, sizeof(a.trace_id));

    snprintf(a.state, sizeof(a.state), "rojo=1");
    txo_trace_child(&a, &child);
    assert_memory_equal(child.trace_id, a.trace_id, sizeof(a.trace_id));
    assert_memory_not_equal(child.span_id, a.span_id, sizeof(a.span_id));
    assert_int_equal(child.flags, a.flags);
    assert_string_equal(child.state, "rojo=1");
    uint8_t before[8];
    memcpy(before, a.span_id, 8);
    txo_trace_child(&a, &a); /* in place */
    assert_memory_not_equal(before, a.span_id, 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_round_trips),
        cmocka_unit_test(test_invalid_traceparents),
        cmocka_unit_test(test_later_versions_and_blanks),
        cmocka_unit_test(test_tracestate),
        cmocka_unit_test(test_long_tracestate_is_cut),
        cmocka_unit_test(test_new_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
