/*
 * A program outside the txo tree, built against an installed libtxo with
 * `pkg-config --cflags --libs libtxo` only: it creates a scratch database, applies the
 * library's migrations, appends an event in its own transaction and publishes it with one relay
 * batch (the null publisher), as a team adopting txo would. Prints "published 1" on success.
 *
 * Usage: outside DBNAME (MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD, MYSQL_DATABASE name
 * the server and a database to connect to first).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <txo/txo.h>

static int fail(const char *what, const struct txo_error *err)
{
    fprintf(stderr, "outside: %s: %s\n", what, err->msg);
    return 1;
}

static int append(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    (void)arg;
    struct txo_outbox_event ev = {
        .aggregate_type = "thing",
        .aggregate_id = "1",
        .event_type = "ThingHappened",
        .payload_json = "{\"n\":1}",
        .idempotency_key = "thing:1:happened",
    };
    return txo_outbox_append(tx, &ev, 0, NULL, NULL, err);
}

static void from_env(struct txo_db_opts *o)
{
    txo_db_opts_init(o);
    const char *v;
    if ((v = getenv("MYSQL_HOST")) != NULL && *v)
        o->host = v;
    if ((v = getenv("MYSQL_PORT")) != NULL && *v)
        o->port = (unsigned)atoi(v);
    if ((v = getenv("MYSQL_USER")) != NULL && *v)
        o->user = v;
    if ((v = getenv("MYSQL_PASSWORD")) != NULL)
        o->password = v;
    if ((v = getenv("MYSQL_DATABASE")) != NULL && *v)
        o->database = v;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: outside DBNAME\n");
        return 2;
    }
    struct txo_error err;
    txo_error_init(&err);
    struct txo_db_opts o;
    from_env(&o);
    struct txo_db *admin = NULL;
    char sql[256];
    if (txo_db_open(&o, &admin, &err) != 0)
        return fail("connect", &err);
    snprintf(sql, sizeof(sql), "CREATE DATABASE `%s`", argv[1]);
    if (txo_db_exec_raw(admin, sql, &err) != 0)
        return fail("create database", &err);
    o.database = argv[1];
    struct txo_db *db = NULL;
    struct txo_publisher *pub = NULL;
    struct txo_relay *relay = NULL;
    int status = 1;
    size_t claimed = 0;
    struct txo_relay_opts ro;
    txo_relay_opts_init(&ro);
    if (txo_db_open(&o, &db, &err) != 0 || txo_migrate(db, NULL, NULL, &err) != 0 ||
        txo_db_transact(db, TXO_ISO_READ_COMMITTED, append, NULL, &err) != 0 ||
        txo_publisher_null_new(&pub, &err) != 0 || txo_relay_new(db, pub, &ro, &relay, &err) != 0 ||
        txo_relay_run_once(relay, &claimed, &err) != 0) {
        fail("outbox and relay", &err);
        goto out;
    }
    struct txo_relay_stats st;
    txo_relay_get_stats(relay, &st);
    printf("published %llu\n", (unsigned long long)st.published);
    status = st.published == 1 && claimed == 1 ? 0 : 1;
out:
    txo_relay_free(relay);
    txo_publisher_free(pub);
    txo_db_close(db);
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS `%s`", argv[1]);
    if (txo_db_exec_raw(admin, sql, &err) != 0)
        fail("drop database", &err);
    txo_db_close(admin);
    return status;
}
