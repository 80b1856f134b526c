/*
 * Shared between the archive's files (src/archive/): the names of the column types as the
 * header writes them.
 */
#ifndef TXO_ARCHIVE_INTERNAL_H
#define TXO_ARCHIVE_INTERNAL_H

#include <stdbool.h>

#include "txo/archive.h"

/* "int", "real", "text", "binary", "json" or "time". */
const char *txo__archive_type_name(enum txo_archive_type type);

/* The type named s; false when s names none. */
bool txo__archive_type_parse(const char *s, enum txo_archive_type *out);

#endif
