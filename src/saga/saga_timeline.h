/*
 * The times of a persisted saga and of its steps, for the operator's saga page (GET /sagas/{id}
 * of the admin API): what txo_saga_load() leaves out because running a saga never needs it.
 * Private to the library.
 */
#ifndef TXO_SAGA_TIMELINE_H
#define TXO_SAGA_TIMELINE_H

#include <stddef.h>

#include "txo/clock.h"
#include "txo/db.h"
#include "txo/err.h"

/* Every time is RFC 3339 UTC; "" when the column is NULL. */
struct txo__saga_step_times {
    unsigned step_order;
    char updated_at[TXO_RFC3339_LEN];   /* its last change (a start, an end, a retry) */
    char deadline_at[TXO_RFC3339_LEN];  /* the step's deadline, set by its first remote call */
    char try_deadline[TXO_RFC3339_LEN]; /* the current call's deadline */
};

struct txo__saga_times {
    char created_at[TXO_RFC3339_LEN];
    char updated_at[TXO_RFC3339_LEN];
    char deadline_at[TXO_RFC3339_LEN];
    struct txo__saga_step_times *steps; /* in step order */
    size_t n_steps;
};

/*
 * Reads the times of saga_id into *out (released with txo__saga_times_release()).
 * Errors: TXO_ENOTFOUND, TXO_ENOMEM, DB errors; *out is untouched on error.
 */
int txo__saga_times_load(struct txo_db *db, const char *saga_id, struct txo__saga_times *out,
                         struct txo_error *err);

void txo__saga_times_release(struct txo__saga_times *t);

#endif
