/*
 * Private to src/saga: the transition checks every state change of the engine goes through.
 * They wrap the transition tables of src/saga/saga_state.c: an illegal move is a bug of the
 * engine (or rows edited by hand), so it is logged at error level and refused with TXO_ESTATE
 * instead of being written.
 */
#ifndef TXO_SAGA_INTERNAL_H
#define TXO_SAGA_INTERNAL_H

#include "txo/saga.h"

/* 0 when the saga may move from -> to; else logs an error and returns TXO_ESTATE in err. */
int txo__saga_check_move(const char *saga_id, enum txo_saga_status from, enum txo_saga_status to,
                         struct txo_error *err);

/* 0 when step step_order (1-based) of the saga may move from -> to; else as above. */
int txo__step_check_move(const char *saga_id, unsigned step_order, enum txo_step_status from,
                         enum txo_step_status to, struct txo_error *err);

/*
 * True when a step whose status becomes (or stays) `step` may have its remote state written
 * from -> to: the same state, or a move of the remote state table of saga_state.c; and
 * CALLING only for a RUNNING step.
 */
bool txo__remote_can_move(enum txo_step_status step, enum txo_remote_state from,
                          enum txo_remote_state to);

/* 0 when txo__remote_can_move(); else logs an error and returns TXO_ESTATE in err. */
int txo__remote_check_move(const char *saga_id, unsigned step_order, enum txo_step_status step,
                           enum txo_remote_state from, enum txo_remote_state to,
                           struct txo_error *err);

/* Parses a saga_steps.remote_state value. Returns 0 or TXO_EINVAL. */
int txo__remote_state_parse(const char *name, enum txo_remote_state *out);

#endif
