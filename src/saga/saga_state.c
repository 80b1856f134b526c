/*
 * The saga and saga-step state machines, and the one of a step's record of its remote call:
 * names as stored in the status columns, parsing, and the one transition table of each. Every
 * status change the engine writes is checked against these tables first
 * (txo__saga_check_move / txo__step_check_move / txo__remote_check_move), so the tables below
 * are the whole truth about which moves exist; include/txo/saga.h describes them in prose.
 *
 * A step may also be updated without changing its status (a retry of a RUNNING or
 * COMPENSATING step records attempts and the error), and a remote state may be written again
 * as it was: neither is a move, and neither is in the tables.
 *
 * Thread-safety: constant tables and pure functions.
 */
#include "core/common.h"

#include "saga/saga_internal.h"

#define N_SAGA_STATUS TXO_SAGA_STATUS_COUNT
#define N_STEP_STATUS 7

static const char *const saga_names[N_SAGA_STATUS] = {
    [TXO_SAGA_RUNNING] = "RUNNING",         [TXO_SAGA_COMPLETED] = "COMPLETED",
    [TXO_SAGA_FAILED] = "FAILED",           [TXO_SAGA_COMPENSATING] = "COMPENSATING",
    [TXO_SAGA_COMPENSATED] = "COMPENSATED", [TXO_SAGA_COMPENSATION_FAILED] = "COMPENSATION_FAILED",
};

static const char *const step_names[N_STEP_STATUS] = {
    [TXO_STEP_PENDING] = "PENDING",
    [TXO_STEP_RUNNING] = "RUNNING",
    [TXO_STEP_COMPLETED] = "COMPLETED",
    [TXO_STEP_FAILED] = "FAILED",
    [TXO_STEP_COMPENSATING] = "COMPENSATING",
    [TXO_STEP_COMPENSATED] = "COMPENSATED",
    [TXO_STEP_COMPENSATION_FAILED] = "COMPENSATION_FAILED",
};

/*
 * saga_moves[from][to]. RUNNING ends COMPLETED, or FAILED when the first step failed (nothing
 * to compensate), or goes COMPENSATING when a later step failed. COMPENSATION_FAILED goes back
 * to COMPENSATING only through txo_saga_retry().
 */
static const bool saga_moves[N_SAGA_STATUS][N_SAGA_STATUS] = {
    [TXO_SAGA_RUNNING] =
        {
            [TXO_SAGA_COMPLETED] = true,
            [TXO_SAGA_FAILED] = true,
            [TXO_SAGA_COMPENSATING] = true,
        },
    [TXO_SAGA_COMPENSATING] =
        {
            [TXO_SAGA_COMPENSATED] = true,
            [TXO_SAGA_COMPENSATION_FAILED] = true,
        },
    [TXO_SAGA_COMPENSATION_FAILED] =
        {
            [TXO_SAGA_COMPENSATING] = true,
        },
};

/*
 * step_moves[from][to]. A step without a compensation still passes through COMPENSATING (in
 * one transaction), so COMPLETED -> COMPENSATED does not exist.
 */
static const bool step_moves[N_STEP_STATUS][N_STEP_STATUS] = {
    [TXO_STEP_PENDING] =
        {
            [TXO_STEP_RUNNING] = true,
        },
    [TXO_STEP_RUNNING] =
        {
            [TXO_STEP_COMPLETED] = true,
            [TXO_STEP_FAILED] = true,
        },
    [TXO_STEP_COMPLETED] =
        {
            [TXO_STEP_COMPENSATING] = true,
        },
    /* Only when its remote part may have taken effect (remote_state is not NONE). */
    [TXO_STEP_FAILED] =
        {
            [TXO_STEP_COMPENSATING] = true,
        },
    [TXO_STEP_COMPENSATING] =
        {
            [TXO_STEP_COMPENSATED] = true,
            [TXO_STEP_COMPENSATION_FAILED] = true,
        },
    [TXO_STEP_COMPENSATION_FAILED] =
        {
            [TXO_STEP_COMPENSATING] = true,
        },
};

#define N_REMOTE_STATE 4

static const char *const remote_names[N_REMOTE_STATE] = {
    [TXO_REMOTE_NONE] = "NONE",
    [TXO_REMOTE_CALLING] = "CALLING",
    [TXO_REMOTE_UNKNOWN] = "UNKNOWN",
    [TXO_REMOTE_DONE] = "DONE",
};

/*
 * remote_moves[from][to] (saga_steps.remote_state: what the action's call is known to have
 * done). Phase (a) records a call about to be made (NONE -> CALLING); its answer says what
 * happened (CALLING -> DONE, UNKNOWN, or NONE for a definite "not done"); a call found CALLING
 * by anyone but the try that made it was cut short and may have happened (CALLING ->
 * UNKNOWN); a later call with the same key may settle an unknown one (UNKNOWN -> DONE).
 * Nothing that may have happened goes back to NONE. CALLING is held only while the step is
 * RUNNING: a step in any other status has an answer or has lost its call (remote_fits).
 */
static const bool remote_moves[N_REMOTE_STATE][N_REMOTE_STATE] = {
    [TXO_REMOTE_NONE] =
        {
            [TXO_REMOTE_CALLING] = true,
        },
    [TXO_REMOTE_CALLING] =
        {
            [TXO_REMOTE_NONE] = true,
            [TXO_REMOTE_UNKNOWN] = true,
            [TXO_REMOTE_DONE] = true,
        },
    [TXO_REMOTE_UNKNOWN] =
        {
            [TXO_REMOTE_DONE] = true,
        },
};

const char *txo_remote_state_name(enum txo_remote_state s)
{
    return txo__name_of(remote_names, N_REMOTE_STATE, (long)s);
}

TXO_NAME_PARSER(txo__remote_state_parse, enum txo_remote_state, remote_names)

static bool saga_valid(enum txo_saga_status s)
{
    return (unsigned)s < N_SAGA_STATUS;
}

static bool step_valid(enum txo_step_status s)
{
    return (unsigned)s < N_STEP_STATUS;
}

const char *txo_saga_status_name(enum txo_saga_status s)
{
    return txo__name_of(saga_names, N_SAGA_STATUS, (long)s);
}

TXO_NAME_PARSER(txo_saga_status_parse, enum txo_saga_status, saga_names)

bool txo_saga_can_move(enum txo_saga_status from, enum txo_saga_status to)
{
    return saga_valid(from) && saga_valid(to) && saga_moves[from][to];
}

bool txo_saga_is_terminal(enum txo_saga_status s)
{
    return s == TXO_SAGA_COMPLETED || s == TXO_SAGA_FAILED || s == TXO_SAGA_COMPENSATED ||
           s == TXO_SAGA_COMPENSATION_FAILED;
}

const char *txo_step_status_name(enum txo_step_status s)
{
    return txo__name_of(step_names, N_STEP_STATUS, (long)s);
}

TXO_NAME_PARSER(txo_step_status_parse, enum txo_step_status, step_names)

bool txo_step_can_move(enum txo_step_status from, enum txo_step_status to)
{
    return step_valid(from) && step_valid(to) && step_moves[from][to];
}

int txo__saga_check_move(const char *saga_id, enum txo_saga_status from, enum txo_saga_status to,
                         struct txo_error *err)
{
    if (txo_saga_can_move(from, to)) {
        return 0;
    }
    TXO_LOG(TXO_LOG_ERROR, "saga", "illegal saga transition",
            TXO_KV_STR("saga_id", saga_id != NULL ? saga_id : "-"),
            TXO_KV_STR("from", txo_saga_status_name(from)),
            TXO_KV_STR("to", txo_saga_status_name(to)));
    return txo_error_set(err, TXO_ESTATE, "saga %s: illegal transition %s -> %s",
                         saga_id != NULL ? saga_id : "-", txo_saga_status_name(from),
                         txo_saga_status_name(to));
}

int txo__step_check_move(const char *saga_id, unsigned step_order, enum txo_step_status from,
                         enum txo_step_status to, struct txo_error *err)
{
    if (txo_step_can_move(from, to)) {
        return 0;
    }
    TXO_LOG(TXO_LOG_ERROR, "saga", "illegal step transition",
            TXO_KV_STR("saga_id", saga_id != NULL ? saga_id : "-"),
            TXO_KV_U64("step_order", step_order), TXO_KV_STR("from", txo_step_status_name(from)),
            TXO_KV_STR("to", txo_step_status_name(to)));
    return txo_error_set(err, TXO_ESTATE, "saga %s step %u: illegal transition %s -> %s",
                         saga_id != NULL ? saga_id : "-", step_order, txo_step_status_name(from),
                         txo_step_status_name(to));
}

static bool remote_valid(enum txo_remote_state s)
{
    return (unsigned)s < N_REMOTE_STATE;
}

/* A step in status `step` may hold remote state `r`: CALLING only while RUNNING. */
static bool remote_fits(enum txo_step_status step, enum txo_remote_state r)
{
    return r != TXO_REMOTE_CALLING || step == TXO_STEP_RUNNING;
}

bool txo__remote_can_move(enum txo_step_status step, enum txo_remote_state from,
                          enum txo_remote_state to)
{
    return step_valid(step) && remote_valid(from) && remote_valid(to) &&
           (from == to || remote_moves[from][to]) && remote_fits(step, to);
}

int txo__remote_check_move(const char *saga_id, unsigned step_order, enum txo_step_status step,
                           enum txo_remote_state from, enum txo_remote_state to,
                           struct txo_error *err)
{
    if (txo__remote_can_move(step, from, to)) {
        return 0;
    }
    TXO_LOG(TXO_LOG_ERROR, "saga", "illegal remote state transition",
            TXO_KV_STR("saga_id", saga_id != NULL ? saga_id : "-"),
            TXO_KV_U64("step_order", step_order),
            TXO_KV_STR("step_status", txo_step_status_name(step)),
            TXO_KV_STR("from", txo_remote_state_name(from)),
            TXO_KV_STR("to", txo_remote_state_name(to)));
    return txo_error_set(err, TXO_ESTATE,
                         "saga %s step %u: illegal remote state transition %s -> %s (step %s)",
                         saga_id != NULL ? saga_id : "-", step_order, txo_remote_state_name(from),
                         txo_remote_state_name(to), txo_step_status_name(step));
}
