/*
 * The library's own migration sets, generated at build time by cmake/embed_migrations.cmake,
 * sorted by file name: every file of sql/migrations ("core"), and the files named
 * NNNN_outbox*.sql ("outbox": what a relay-only database needs).
 */
#ifndef TXO_MIGRATE_DATA_H
#define TXO_MIGRATE_DATA_H

#include "txo/db.h"

extern const struct txo_migration_set txo__core_migrations;
extern const struct txo_migration_set txo__outbox_migrations;

#endif
