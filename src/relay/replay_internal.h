/*
 * The replay's reader of the retention archive (replay_archive.c), private to the library: the
 * archived outbox rows of a `txo clean --archive` directory, in id order, as claim columns.
 */
#ifndef TXO_RELAY_REPLAY_INTERNAL_H
#define TXO_RELAY_REPLAY_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "txo/db.h"
#include "txo/replay.h"

struct txo__replay_archive;

/* Lists the files of dir/outbox_events. Errors: TXO_ECONFIG (no such directory), TXO_EINVAL
 * (a since or until that is not a time), TXO_ENOMEM. */
int txo__replay_archive_open(const char *dir, const struct txo_replay_filter *f,
                             struct txo__replay_archive **out, struct txo_error *err);

/* The last id the archive holds (0: no file). */
int64_t txo__replay_archive_last_id(const struct txo__replay_archive *a);

/*
 * Up to limit published rows the filter chooses with ids in (cursor, to_id], in id order, in
 * the relay's claim columns (enum claim_col); fewer than limit: the range is done. Cursors of
 * successive calls ascend. Errors: a file that does not verify (TXO_EIO, TXO_EINVAL, naming
 * it), TXO_ENOMEM.
 */
int txo__replay_archive_next(struct txo__replay_archive *a, const struct txo_replay_filter *f,
                             int64_t cursor, int64_t to_id, size_t limit, struct txo_rows **out,
                             struct txo_error *err);

void txo__replay_archive_free(struct txo__replay_archive *a);

#endif
