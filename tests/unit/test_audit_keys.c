/*
 * Unit tests for src/audit/audit_keys.c, the memory of one outbox audit: keys get dense indexes
 * in the order they were added, a key added twice keeps its index, lookups are byte for byte
 * (a prefix, another case, a key with the same hash bucket are other keys), the table grows
 * past its first size without losing a key, a failed allocation leaves the set as it was, and
 * the arena copies strings longer than a chunk.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "audit/audit_internal.h"
#include "txo/txo.h"

static size_t add(struct audit_keys *ks, const char *key, bool want_added)
{
    size_t i = AUDIT_NO_KEY;
    bool added = !want_added;
    assert_int_equal(txo__audit_keys_add(ks, key, strlen(key), &i, &added), 0);
    assert_int_equal(added, want_added);
    return i;
}

static void test_indexes_and_lookups(void **state)
{
    (void)state;
    struct audit_keys ks;
    memset(&ks, 0, sizeof(ks));
    assert_int_equal(txo__audit_keys_find(&ks, "a", 1), AUDIT_NO_KEY);
    assert_int_equal(add(&ks, "order:7:created", true), 0);
    assert_int_equal(add(&ks, "order:7:cancelled", true), 1);
    assert_int_equal(add(&ks, "Order:7:created", true), 2);
    assert_int_equal(add(&ks, "order:7:created", false), 0);
    assert_int_equal(ks.n, 3);
    assert_int_equal(txo__audit_keys_find(&ks, "order:7:cancelled", 17), 1);
    assert_int_equal(txo__audit_keys_find(&ks, "order:7:c", 9), AUDIT_NO_KEY);
    assert_int_equal(txo__audit_keys_find(&ks, "order:7:createdX", 16), AUDIT_NO_KEY);
    /* len counts, not the NUL: a longer buffer names its first len bytes. */
    assert_int_equal(txo__audit_keys_find(&ks, "order:7:createdX", 15), 0);
    assert_string_equal(ks.keys[2], "Order:7:created");
    txo__audit_keys_release(&ks);
    assert_int_equal(ks.n, 0);
    txo__audit_keys_release(&ks); /* twice is fine */
}

static void test_grows_without_losing_keys(void **state)
{
    (void)state;
    struct audit_keys ks;
    memset(&ks, 0, sizeof(ks));
    char key[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof(key), "k:%d", i);
        assert_int_equal(add(&ks, key, true), (size_t)i);
    }
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof(key), "k:%d", i);
        assert_int_equal(txo__audit_keys_find(&ks, key, strlen(key)), (size_t)i);
    }
    assert_int_equal(txo__audit_keys_find(&ks, "k:20000", 7), AUDIT_NO_KEY);
    assert_true(ks.n_slots >= 2 * ks.n);
    txo__audit_keys_release(&ks);
}

/* Every allocation of an add fails in turn: the call reports TXO_ENOMEM and the set is as it
 * was; the add then succeeds. */
static void test_out_of_memory_changes_nothing(void **state)
{
    (void)state;
    struct audit_keys ks;
    memset(&ks, 0, sizeof(ks));
    char key[32];
    for (int i = 0; i < 1024; i++) {
        snprintf(key, sizeof(key), "k:%d", i);
        add(&ks, key, true);
    }
    /* The 1025th key needs both the slots and the keys array to grow. */
    long allocations = 0;
    for (long fail = 0;; fail++) {
        txo_alloc_fail_after(fail);
        size_t i = AUDIT_NO_KEY;
        bool added = false;
        int rc = txo__audit_keys_add(&ks, "new-key", 7, &i, &added);
        txo_alloc_fail_after(-1);
        if (rc == 0) {
            assert_true(added);
            assert_int_equal(i, 1024);
            allocations = fail;
            break;
        }
        assert_int_equal(rc, TXO_ENOMEM);
        assert_int_equal(ks.n, 1024);
        assert_int_equal(txo__audit_keys_find(&ks, "new-key", 7), AUDIT_NO_KEY);
        assert_int_equal(txo__audit_keys_find(&ks, "k:5", 3), 5);
        assert_true(fail < 10);
    }
    assert_int_equal(allocations, 2);
    assert_int_equal(txo__audit_keys_find(&ks, "new-key", 7), 1024);
    txo__audit_keys_release(&ks);
}

static void test_arena_long_strings(void **state)
{
    (void)state;
    struct audit_arena ar = {NULL};
    size_t big = 200 * 1024;
    char *src = malloc(big);
    assert_non_null(src);
    memset(src, 'x', big);
    const char *a = txo__audit_arena_strndup(&ar, "short", 5);
    const char *b = txo__audit_arena_strndup(&ar, src, big);
    const char *c = txo__audit_arena_strndup(&ar, "after", 3);
    assert_string_equal(a, "short");
    assert_int_equal(strlen(b), big);
    assert_string_equal(c, "aft");
    free(src);
    txo__audit_arena_release(&ar);
    assert_null(ar.head);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_indexes_and_lookups),
        cmocka_unit_test(test_grows_without_losing_keys),
        cmocka_unit_test(test_out_of_memory_changes_nothing),
        cmocka_unit_test(test_arena_long_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
