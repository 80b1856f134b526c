/*
 * The saga and step state machines, and the remote state of a step (src/saga/saga_state.c):
 * names, parsing, and the exact set of legal transitions, checked exhaustively against the
 * lists in include/txo/saga.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "saga/saga_internal.h"
#include "txo/txo.h"

#define N_SAGA 6
#define N_STEP 7

struct move {
    int from;
    int to;
};

static const struct move saga_legal[] = {
    {TXO_SAGA_RUNNING, TXO_SAGA_COMPLETED},
    {TXO_SAGA_RUNNING, TXO_SAGA_FAILED},
    {TXO_SAGA_RUNNING, TXO_SAGA_COMPENSATING},
    {TXO_SAGA_COMPENSATING, TXO_SAGA_COMPENSATED},
    {TXO_SAGA_COMPENSATING, TXO_SAGA_COMPENSATION_FAILED},
    {TXO_SAGA_COMPENSATION_FAILED, TXO_SAGA_COMPENSATING},
};

static const struct move step_legal[] = {
    {TXO_STEP_PENDING, TXO_STEP_RUNNING},
    {TXO_STEP_RUNNING, TXO_STEP_COMPLETED},
    {TXO_STEP_RUNNING, TXO_STEP_FAILED},
    {TXO_STEP_COMPLETED, TXO_STEP_COMPENSATING},
    {TXO_STEP_FAILED, TXO_STEP_COMPENSATING}, /* its remote part may have taken effect */
    {TXO_STEP_COMPENSATING, TXO_STEP_COMPENSATED},
    {TXO_STEP_COMPENSATING, TXO_STEP_COMPENSATION_FAILED},
    {TXO_STEP_COMPENSATION_FAILED, TXO_STEP_COMPENSATING},
};

/* The remote state of a step (what its action's call is known to have done). */
#define N_REMOTE 4

static const struct move remote_legal[] = {
    {TXO_REMOTE_NONE, TXO_REMOTE_CALLING},    /* phase (a): a call about to be made */
    {TXO_REMOTE_CALLING, TXO_REMOTE_DONE},    /* it answered "done" */
    {TXO_REMOTE_CALLING, TXO_REMOTE_UNKNOWN}, /* no answer, or cut short by a crash */
    {TXO_REMOTE_CALLING, TXO_REMOTE_NONE},    /* a definite "not done" */
    {TXO_REMOTE_UNKNOWN, TXO_REMOTE_DONE},    /* a later call with the same key answered */
};

static bool listed(const struct move *moves, size_t n, int from, int to)
{
    for (size_t i = 0; i < n; i++) {
        if (moves[i].from == from && moves[i].to == to) {
            return true;
        }
    }
    return false;
}

static void test_saga_names_round_trip(void **state)
{
    (void)state;
    static const char *const names[N_SAGA] = {"RUNNING",      "COMPLETED",   "FAILED",
                                              "COMPENSATING", "COMPENSATED", "COMPENSATION_FAILED"};
    for (int s = 0; s < N_SAGA; s++) {
        assert_string_equal(txo_saga_status_name((enum txo_saga_status)s), names[s]);
        enum txo_saga_status parsed = TXO_SAGA_RUNNING;
        assert_int_equal(txo_saga_status_parse(names[s], &parsed), 0);
        assert_int_equal(parsed, s);
    }
    enum txo_saga_status out = TXO_SAGA_COMPLETED;
    assert_int_equal(txo_saga_status_parse("running", &out), TXO_EINVAL);
    assert_int_equal(txo_saga_status_parse("", &out), TXO_EINVAL);
    assert_int_equal(txo_saga_status_parse(NULL, &out), TXO_EINVAL);
    assert_int_equal(out, TXO_SAGA_COMPLETED); /* untouched on failure */
    assert_string_equal(txo_saga_status_name((enum txo_saga_status)99), "INVALID");
}

static void test_step_names_round_trip(void **state)
{
    (void)state;
    static const char *const names[N_STEP] = {
        "PENDING",      "RUNNING",     "COMPLETED",          "FAILED",
        "COMPENSATING", "COMPENSATED", "COMPENSATION_FAILED"};
    for (int s = 0; s < N_STEP; s++) {
        assert_string_equal(txo_step_status_name((enum txo_step_status)s), names[s]);
        enum txo_step_status parsed = TXO_STEP_PENDING;
        assert_int_equal(txo_step_status_parse(names[s], &parsed), 0);
        assert_int_equal(parsed, s);
    }
    enum txo_step_status out = TXO_STEP_FAILED;
    assert_int_equal(txo_step_status_parse("DONE", &out), TXO_EINVAL);
    assert_int_equal(txo_step_status_parse(NULL, &out), TXO_EINVAL);
    assert_int_equal(out, TXO_STEP_FAILED);
    assert_string_equal(txo_step_status_name((enum txo_step_status) - 1), "INVALID");
    assert_string_equal(txo_saga_deadline_name(TXO_DEADLINE_SAGA), "saga");
    assert_string_equal(txo_saga_deadline_name((enum txo_saga_deadline)4), "INVALID");
}

/* Every pair, legal or not: the table allows exactly the listed moves. */
static void test_saga_transition_table(void **state)
{
    (void)state;
    for (int from = 0; from < N_SAGA; from++) {
        for (int to = 0; to < N_SAGA; to++) {
            bool want = listed(saga_legal, TXO_ARRAY_LEN(saga_legal), from, to);
            bool got = txo_saga_can_move((enum txo_saga_status)from, (enum txo_saga_status)to);
            if (want != got) {
                fail_msg("saga %s -> %s: want %d got %d",
                         txo_saga_status_name((enum txo_saga_status)from),
                         txo_saga_status_name((enum txo_saga_status)to), want, got);
            }
        }
    }
    assert_false(txo_saga_can_move(TXO_SAGA_RUNNING, (enum txo_saga_status)42));
    assert_false(txo_saga_can_move((enum txo_saga_status)42, TXO_SAGA_RUNNING));
}

static void test_step_transition_table(void **state)
{
    (void)state;
    for (int from = 0; from < N_STEP; from++) {
        for (int to = 0; to < N_STEP; to++) {
            bool want = listed(step_legal, TXO_ARRAY_LEN(step_legal), from, to);
            bool got = txo_step_can_move((enum txo_step_status)from, (enum txo_step_status)to);
            if (want != got) {
                fail_msg("step %s -> %s: want %d got %d",
                         txo_step_status_name((enum txo_step_status)from),
                         txo_step_status_name((enum txo_step_status)to), want, got);
            }
        }
    }
    assert_false(txo_step_can_move(TXO_STEP_PENDING, (enum txo_step_status)7));
}

/* Every remote state pair for every step status: a listed move or no change, and CALLING only
 * while the step is RUNNING, so no finished or compensating step can be left CALLING. */
static void test_remote_transition_table(void **state)
{
    (void)state;
    for (int step = 0; step < N_STEP; step++) {
        for (int from = 0; from < N_REMOTE; from++) {
            for (int to = 0; to < N_REMOTE; to++) {
                bool want =
                    (from == to || listed(remote_legal, TXO_ARRAY_LEN(remote_legal), from, to)) &&
                    (to != TXO_REMOTE_CALLING || step == TXO_STEP_RUNNING);
                bool got =
                    txo__remote_can_move((enum txo_step_status)step, (enum txo_remote_state)from,
                                         (enum txo_remote_state)to);
                if (want != got)
                    fail_msg("step %s, remote %s -> %s: want %d got %d",
                             txo_step_status_name((enum txo_step_status)step),
                             txo_remote_state_name((enum txo_remote_state)from),
                             txo_remote_state_name((enum txo_remote_state)to), want, got);
            }
        }
    }
    /* A call that may have happened is never forgotten. */
    for (int step = 0; step < N_STEP; step++) {
        assert_false(
            txo__remote_can_move((enum txo_step_status)step, TXO_REMOTE_UNKNOWN, TXO_REMOTE_NONE));
        assert_false(
            txo__remote_can_move((enum txo_step_status)step, TXO_REMOTE_DONE, TXO_REMOTE_NONE));
    }
    assert_false(txo__remote_can_move(TXO_STEP_RUNNING, TXO_REMOTE_NONE, (enum txo_remote_state)4));
    assert_false(txo__remote_can_move((enum txo_step_status)7, TXO_REMOTE_NONE, TXO_REMOTE_NONE));
}

static void test_terminal(void **state)
{
    (void)state;
    assert_false(txo_saga_is_terminal(TXO_SAGA_RUNNING));
    assert_false(txo_saga_is_terminal(TXO_SAGA_COMPENSATING));
    assert_true(txo_saga_is_terminal(TXO_SAGA_COMPLETED));
    assert_true(txo_saga_is_terminal(TXO_SAGA_FAILED));
    assert_true(txo_saga_is_terminal(TXO_SAGA_COMPENSATED));
    assert_true(txo_saga_is_terminal(TXO_SAGA_COMPENSATION_FAILED));
    /* A terminal status has no way out except the retry of COMPENSATION_FAILED. */
    for (int to = 0; to < N_SAGA; to++) {
        assert_false(txo_saga_can_move(TXO_SAGA_COMPLETED, (enum txo_saga_status)to));
        assert_false(txo_saga_can_move(TXO_SAGA_FAILED, (enum txo_saga_status)to));
        assert_false(txo_saga_can_move(TXO_SAGA_COMPENSATED, (enum txo_saga_status)to));
    }
}

static void count_errors(enum txo_log_level level, const char *component, const char *msg,
                         const struct txo_log_field *fields, size_t n_fields, void *arg)
{
    (void)msg;
    (void)fields;
    (void)n_fields;
    if (level == TXO_LOG_ERROR && strcmp(component, "saga") == 0) {
        (*(int *)arg)++;
    }
}

/* The checks the engine calls before every write: illegal moves are TXO_ESTATE with detail. */
static void test_check_move_rejects_illegal(void **state)
{
    (void)state;
    int errors = 0;
    txo_log_set_sink(count_errors, &errors);
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo__saga_check_move("s-1", TXO_SAGA_RUNNING, TXO_SAGA_COMPENSATING, &err), 0);
    assert_int_equal(err.code, 0);
    assert_int_equal(txo__saga_check_move("s-1", TXO_SAGA_COMPLETED, TXO_SAGA_RUNNING, &err),
                     TXO_ESTATE);
    assert_int_equal(err.code, TXO_ESTATE);
    assert_non_null(strstr(err.msg, "s-1"));
    assert_non_null(strstr(err.msg, "COMPLETED -> RUNNING"));

    txo_error_init(&err);
    assert_int_equal(txo__step_check_move("s-2", 2, TXO_STEP_PENDING, TXO_STEP_RUNNING, &err), 0);
    /* No shortcuts: a pending step never fails or compensates directly, and a failed step is
     * undone only through COMPENSATING. */
    assert_int_equal(txo__step_check_move("s-2", 2, TXO_STEP_PENDING, TXO_STEP_FAILED, &err),
                     TXO_ESTATE);
    assert_non_null(strstr(err.msg, "step 2"));
    assert_int_equal(txo__step_check_move("s-2", 3, TXO_STEP_FAILED, TXO_STEP_COMPENSATED, NULL),
                     TXO_ESTATE);
    assert_int_equal(txo__step_check_move("s-2", 3, TXO_STEP_COMPLETED, TXO_STEP_COMPENSATED, NULL),
                     TXO_ESTATE);
    assert_int_equal(txo__step_check_move("s-2", 1, TXO_STEP_RUNNING, TXO_STEP_RUNNING, NULL),
                     TXO_ESTATE);

    /* A step that ends (here refused, FAILED) with its call still CALLING: the call was cut
     * short, so it must say UNKNOWN. */
    txo_error_init(&err);
    assert_int_equal(txo__remote_check_move("s-3", 2, TXO_STEP_FAILED, TXO_REMOTE_CALLING,
                                            TXO_REMOTE_CALLING, &err),
                     TXO_ESTATE);
    assert_non_null(strstr(err.msg, "step 2"));
    assert_non_null(strstr(err.msg, "CALLING -> CALLING"));
    assert_int_equal(txo__remote_check_move("s-3", 2, TXO_STEP_FAILED, TXO_REMOTE_CALLING,
                                            TXO_REMOTE_UNKNOWN, NULL),
                     0);
    assert_int_equal(txo__remote_check_move("s-3", 2, TXO_STEP_COMPENSATED, TXO_REMOTE_UNKNOWN,
                                            TXO_REMOTE_NONE, NULL),
                     TXO_ESTATE);
    txo_log_set_sink(NULL, NULL);
    assert_int_equal(errors, 7); /* each illegal move is logged as the bug it is */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_saga_names_round_trip),
        cmocka_unit_test(test_step_names_round_trip),
        cmocka_unit_test(test_saga_transition_table),
        cmocka_unit_test(test_step_transition_table),
        cmocka_unit_test(test_remote_transition_table),
        cmocka_unit_test(test_terminal),
        cmocka_unit_test(test_check_move_rejects_illegal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
