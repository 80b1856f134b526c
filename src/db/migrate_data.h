/*
 * The library's own migration set (sql/migrations/NNNN_name.sql), generated at build time by
 * cmake/embed_migrations.cmake, sorted by file name.
 */
#ifndef TXO_MIGRATE_DATA_H
#define TXO_MIGRATE_DATA_H

#include "txo/db.h"

extern const struct txo_migration_set txo__core_migrations;

#endif
