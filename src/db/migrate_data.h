/*
 * The SQL migrations compiled into libtxo. The table is generated at build time from
 * the sql/migrations/NNNN_name.sql files by cmake/embed_migrations.cmake, sorted by file name.
 */
#ifndef TXO_MIGRATE_DATA_H
#define TXO_MIGRATE_DATA_H

#include <stddef.h>

struct txo__migration {
    const char *name; /* "0001_outbox.sql" */
    const char *sql;  /* the file's text, NUL-terminated */
};

extern const struct txo__migration txo__migrations[];
extern const size_t txo__migrations_count;

#endif
