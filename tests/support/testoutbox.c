/*
 * Test support: numbered order events in the outbox (see testoutbox.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testdb.h"
#include "testoutbox.h"

static int append_events(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    const struct testoutbox_events *e = arg;
    const char *type = e->aggregate_type != NULL ? e->aggregate_type : "order";
    for (unsigned i = e->from; i <= e->to; i++) {
        char key[64], payload[32], agg[16];
        snprintf(key, sizeof(key), "%s:%u:created", type, i);
        snprintf(payload, sizeof(payload), "{\"order_id\":%u}", i);
        snprintf(agg, sizeof(agg), "%u", i);
        struct txo_outbox_event ev = {
            .aggregate_type = i == e->unroutable ? "nobody" : type,
            .aggregate_id = agg,
            .event_type = "OrderCreated",
            .payload_json = payload,
            .idempotency_key = key,
        };
        int rc = txo_outbox_append(tx, &ev, 0, NULL, NULL, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

void testoutbox_append(struct txo_db *db, const struct testoutbox_events *e)
{
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_transact(db, TXO_ISO_READ_COMMITTED, append_events, (void *)e, &err) < 0)
        fail_msg("appending events %u..%u: %s", e->from, e->to, err.msg);
}

void testoutbox_append_orders(struct txo_db *db, unsigned n)
{
    testoutbox_append(db, &(struct testoutbox_events){.from = 1, .to = n});
}

void testoutbox_insert_seq(struct txo_db *db, unsigned n, const char *key_prefix)
{
    /* The sequence engine's table names its bound; only the key prefix is a value. */
    char sql[400];
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
             "idempotency_key) SELECT 'order', seq, 'OrderCreated', JSON_OBJECT('n', seq), "
             "CONCAT(?, ':', seq) FROM seq_1_to_%u ORDER BY seq",
             n);
    struct txo_param p = txo_p_str(key_prefix);
    struct txo_exec_result res;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_exec(db, sql, &p, 1, &res, &err) < 0)
        fail_msg("inserting %u events: %s", n, err.msg);
}

int64_t testoutbox_dead_letter(struct txo_db *db, const char *error, int64_t *event_id)
{
    testdb_exec(db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type,"
                    " payload, idempotency_key, status, attempts, last_error)"
                    " VALUES ('order', 4242, 'OrderCreated', '{\"order_id\":4242}',"
                    " 'order:4242:created', 'FAILED', 10, 'broker unavailable')");
    *event_id =
        testdb_q(db, "SELECT id FROM outbox_events WHERE idempotency_key = 'order:4242:created'");
    assert_true(*event_id > 0);
    /* The relay's mark parks the aggregate of an event it dead-letters. */
    testdb_exec(db, "INSERT INTO outbox_parked (aggregate_type, aggregate_id, event_id) "
                    "SELECT aggregate_type, aggregate_id, id FROM outbox_events "
                    "WHERE idempotency_key = 'order:4242:created'");
    struct txo_param p[] = {txo_p_i64(*event_id), txo_p_str(error)};
    struct txo_error err;
    txo_error_init(&err);
    struct txo_exec_result res = {0, 0};
    if (txo_db_exec(db,
                    "INSERT INTO dead_letter_events (source_event_id, event_type, payload, error)"
                    " VALUES (?, 'OrderCreated', '{\"order_id\":4242}', ?)",
                    p, 2, &res, &err) != 0)
        fail_msg("inserting the dead letter: %s", err.msg);
    return (int64_t)res.insert_id;
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

size_t testoutbox_sort_repeats(char **keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (keys[i] == NULL)
            fail_msg("message %zu of %zu carries no key", i, n);
    qsort(keys, n, sizeof(*keys), cmp_key);
    size_t repeats = 0;
    for (size_t i = 1; i < n; i++)
        repeats += strcmp(keys[i - 1], keys[i]) == 0;
    return repeats;
}

size_t testoutbox_check_keys(struct txo_db *db, char **keys, size_t n, const char *count_sql)
{
    size_t repeats = testoutbox_sort_repeats(keys, n);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(keys[i - 1], keys[i]) == 0)
            continue;
        struct txo_param p = txo_p_str(keys[i]);
        int64_t rows = testdb_i64(db, count_sql, &p, 1);
        if (rows != 1)
            fail_msg("key %s: %lld outbox rows (%s), want 1", keys[i], (long long)rows, count_sql);
    }
    return repeats;
}
