/*
 * The outbox and command-queue state machines as the SQL runs them. Each statement that
 * changes a status is named, with its moves, in one list (OUTBOX_MOVES in
 * src/outbox/outbox_moves.h, CMDQ_MOVES in src/cmdq/cmdq_sql.h). For every entry this test
 *   - checks the move against txo_outbox_can_move() / txo_cmdq_can_move();
 *   - reads the statement's SQL text: the states its SET writes (`status = 'X'`,
 *     `status = IF(..., 'X', 'Y')`) and the states its rows are picked from (`status = 'X'`
 *     or `status IN ('X', ...)` in the WHERE of the statement, or of the locking SELECT that
 *     picked the ids of an UPDATE by id list), and fails when the SQL makes a move the list
 *     does not declare or the list declares one the SQL cannot make;
 * and checks that every move the transition table allows is made by some statement. The saga
 * engine's list (SAGA_MOVES) mostly binds its states: those statements must bind them, and
 * each statement that writes a step's remote_state must be listed for that machine too. So a
 * statement edited to an illegal move, a table entry nobody uses and a list that lies about
 * its SQL all fail here. The checker is run on wrong lists too, to show that it can fail.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cmdq/cmdq_sql.h"
#include "orders.h"
#include "orders_sql.h"
#include "outbox/outbox_moves.h"
#include "saga/saga_sql.h"
#include "txo/txo.h"

/* One state machine, seen through int states. */
struct machine {
    const char *table;
    int n_states;
    int (*parse)(const char *name, int *out);
    const char *(*name)(int s);
    bool (*can_move)(int from, int to);
};

/* One entry of a moves list. */
struct move {
    const char *stmt_name;
    const char *stmt;
    const char *picked_name;
    const char *picked;
    int from;
    int to;
};

static int outbox_parse(const char *name, int *out)
{
    enum txo_outbox_status s;
    int rc = txo_outbox_status_parse(name, &s);
    if (rc == 0)
        *out = (int)s;
    return rc;
}

static const char *outbox_name(int s)
{
    return txo_outbox_status_name((enum txo_outbox_status)s);
}

static bool outbox_can_move(int from, int to)
{
    return txo_outbox_can_move((enum txo_outbox_status)from, (enum txo_outbox_status)to);
}

static int cmdq_parse(const char *name, int *out)
{
    enum txo_cmdq_status s;
    int rc = txo_cmdq_status_parse(name, &s);
    if (rc == 0)
        *out = (int)s;
    return rc;
}

static const char *cmdq_name(int s)
{
    return txo_cmdq_status_name((enum txo_cmdq_status)s);
}

static bool cmdq_can_move(int from, int to)
{
    return txo_cmdq_can_move((enum txo_cmdq_status)from, (enum txo_cmdq_status)to);
}

static int order_parse(const char *name, int *out)
{
    enum order_status s;
    int rc = order_status_parse(name, &s);
    if (rc == 0)
        *out = (int)s;
    return rc;
}

static const char *order_name(int s)
{
    return order_status_name((enum order_status)s);
}

static bool order_can_move(int from, int to)
{
    return order_status_can_move((enum order_status)from, (enum order_status)to);
}

static int saga_parse(const char *name, int *out)
{
    enum txo_saga_status s;
    int rc = txo_saga_status_parse(name, &s);
    if (rc == 0)
        *out = (int)s;
    return rc;
}

static const char *saga_name(int s)
{
    return txo_saga_status_name((enum txo_saga_status)s);
}

static bool saga_can_move(int from, int to)
{
    return txo_saga_can_move((enum txo_saga_status)from, (enum txo_saga_status)to);
}

static const struct machine outbox = {"outbox_events", TXO_OUTBOX_SKIPPED + 1, outbox_parse,
                                      outbox_name, outbox_can_move};
static const struct machine orders = {"orders", ORDER_STATUS_COUNT, order_parse, order_name,
                                      order_can_move};
static const struct machine sagas = {"saga_instances", TXO_SAGA_STATUS_COUNT, saga_parse, saga_name,
                                     saga_can_move};
static const struct machine cmdq = {"command_queue", 4, cmdq_parse, cmdq_name, cmdq_can_move};

#define OUTBOX_ENTRY(STMT, PICKED, FROM, TO)                                                       \
    {#STMT, STMT, #PICKED, PICKED, TXO_OUTBOX_##FROM, TXO_OUTBOX_##TO},
#define CMDQ_ENTRY(STMT, PICKED, FROM, TO)                                                         \
    {#STMT, STMT, #PICKED, PICKED, TXO_CMDQ_##FROM, TXO_CMDQ_##TO},

static const struct move outbox_moves[] = {OUTBOX_MOVES(OUTBOX_ENTRY)};
static const struct move cmdq_moves[] = {CMDQ_MOVES(CMDQ_ENTRY)};

#define ORDER_ENTRY(STMT, FROM, TO) {#STMT, STMT, #STMT, STMT, ORDER_##FROM, ORDER_##TO},
static const struct move order_moves[] = {ORDERS_MOVES(ORDER_ENTRY)};

/* The saga engine's list: literal moves of saga_instances are checked like the others; the
 * statements whose states are bound values are checked to bind them. */
#define TXO_SAGA_BOUND (-1)
struct saga_move {
    const char *stmt_name;
    const char *stmt;
    const char *machine;
    int from, to;
};
#define SAGA_STATE(NAME)               SAGA_STATE_##NAME
#define SAGA_STATE_BOUND               TXO_SAGA_BOUND
#define SAGA_STATE_COMPENSATION_FAILED TXO_SAGA_COMPENSATION_FAILED
#define SAGA_STATE_COMPENSATING        TXO_SAGA_COMPENSATING
#define SAGA_ENTRY(STMT, MACHINE, FROM, TO)                                                        \
    {#STMT, STMT, #MACHINE, SAGA_STATE(FROM), SAGA_STATE(TO)},
static const struct saga_move saga_moves[] = {SAGA_MOVES(SAGA_ENTRY)};

/* ---- reading the SQL ---- */

static bool is_word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static const char *skip_spaces(const char *p, const char *end)
{
    while (p < end && *p == ' ')
        p++;
    return p;
}

/*
 * Adds the state of the quoted literal at p (p[0] == '\'') to *mask and returns the byte after
 * the closing quote; counts an unknown literal in *problems.
 */
static const char *read_literal(const struct machine *m, const char *what, const char *p,
                                const char *end, unsigned *mask, int *problems)
{
    const char *close = memchr(p + 1, '\'', (size_t)(end - p - 1));
    if (close == NULL) {
        print_error("%s: unterminated string literal\n", what);
        (*problems)++;
        return end;
    }
    char name[64];
    snprintf(name, sizeof(name), "%.*s", (int)(close - p - 1), p + 1);
    int s;
    if (m->parse(name, &s) != 0) {
        print_error("%s: '%s' is not a state of %s\n", what, name, m->table);
        (*problems)++;
    } else {
        *mask |= 1u << s;
    }
    return close + 1;
}

/* The literals inside the parenthesis that opens at p (IF(...) or IN (...)). */
static const char *read_group(const struct machine *m, const char *what, const char *p,
                              const char *end, unsigned *mask, int *problems)
{
    int depth = 0;
    while (p < end) {
        if (*p == '\'') {
            p = read_literal(m, what, p, end, mask, problems);
            continue;
        }
        if (*p == '(')
            depth++;
        else if (*p == ')' && --depth == 0)
            return p + 1;
        p++;
    }
    print_error("%s: unbalanced parenthesis\n", what);
    (*problems)++;
    return end;
}

/*
 * The end of the subquery "(SELECT ..." that opens at p: its closing parenthesis + 1, or end
 * when it is not closed. Quotes are skipped so that a parenthesis in a literal does not count.
 */
static const char *subquery_end(const char *p, const char *end)
{
    int depth = 0;
    for (; p < end; p++) {
        if (*p == '\'') {
            const char *close = memchr(p + 1, '\'', (size_t)(end - p - 1));
            if (close == NULL)
                return end;
            p = close;
        } else if (*p == '(') {
            depth++;
        } else if (*p == ')' && --depth == 0) {
            return p + 1;
        }
    }
    return end;
}

/*
 * The states named at every use of the column `status` in [begin, end): `status = 'X'`,
 * `status = IF(cond, 'X', 'Y')` or `status IN ('X', ...)`. Any other use is a problem: the
 * test could not tell which states the statement touches. A subquery "(SELECT ...)" is left
 * out: it reads other rows (the ordered claim's look at the event before a candidate), it does
 * not pick the rows the statement moves.
 */
static unsigned status_states(const struct machine *m, const char *what, const char *begin,
                              const char *end, int *problems)
{
    static const char col[] = "status";
    unsigned mask = 0;
    const char *p = begin;
    while (p < end) {
        const char *hit = strstr(p, col);
        if (hit == NULL || hit >= end)
            break;
        const char *sub = strstr(p, "(SELECT ");
        if (sub != NULL && sub < hit) {
            p = subquery_end(sub, end);
            continue;
        }
        const char *after = hit + strlen(col);
        p = after;
        if ((hit > begin && is_word_char(hit[-1])) || (after < end && is_word_char(*after)))
            continue; /* part of another name, such as replay_status */
        const char *q = skip_spaces(after, end);
        if (q < end && *q == '=') {
            q = skip_spaces(q + 1, end);
            if (q < end && *q == '\'') {
                p = read_literal(m, what, q, end, &mask, problems);
                continue;
            }
            if ((size_t)(end - q) > 3 && strncmp(q, "IF(", 3) == 0) {
                p = read_group(m, what, q + 2, end, &mask, problems);
                continue;
            }
        } else if ((size_t)(end - q) > 3 && strncmp(q, "IN ", 3) == 0) {
            q = skip_spaces(q + 2, end);
            if (q < end && *q == '(') {
                p = read_group(m, what, q, end, &mask, problems);
                continue;
            }
        }
        print_error("%s: cannot read the use of status at \"%.30s\"\n", what, hit);
        (*problems)++;
    }
    return mask;
}

/* The SET list of an UPDATE and its WHERE (everything after it). */
static void clauses(const char *sql, const char **set, const char **set_end, const char **where)
{
    const char *end = sql + strlen(sql);
    const char *s = strstr(sql, " SET ");
    const char *w = strstr(sql, " WHERE ");
    *where = w != NULL ? w : end;
    *set = s != NULL && (w == NULL || s < w) ? s : end;
    *set_end = *where;
}

/* States that the WHERE of sql picks rows from (0: it does not say). */
static unsigned picked_states(const struct machine *m, const char *name, const char *sql,
                              int *problems)
{
    const char *set, *set_end, *where;
    clauses(sql, &set, &set_end, &where);
    return status_states(m, name, where, sql + strlen(sql), problems);
}

static unsigned set_states(const struct machine *m, const char *name, const char *sql,
                           int *problems)
{
    const char *set, *set_end, *where;
    clauses(sql, &set, &set_end, &where);
    return status_states(m, name, set, set_end, problems);
}

static bool declared(const struct move *moves, size_t n, const struct move *like, int from, int to)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(moves[i].stmt_name, like->stmt_name) == 0 &&
            strcmp(moves[i].picked_name, like->picked_name) == 0 && moves[i].from == from &&
            moves[i].to == to)
            return true;
    }
    return false;
}

/* Every disagreement between the list, its SQL and the transition table; 0 when none. */
static int check_moves(const struct machine *m, const struct move *moves, size_t n,
                       bool whole_table)
{
    int problems = 0;
    for (size_t i = 0; i < n; i++) {
        const struct move *mv = &moves[i];
        if (!m->can_move(mv->from, mv->to)) {
            print_error("%s: %s -> %s is not a move of the %s state machine\n", mv->stmt_name,
                        m->name(mv->from), m->name(mv->to), m->table);
            problems++;
        }
        if (strncmp(mv->stmt, "UPDATE ", 7) != 0) {
            print_error("%s: not an UPDATE\n", mv->stmt_name);
            problems++;
            continue;
        }
        unsigned from = picked_states(m, mv->picked_name, mv->picked, &problems);
        if (mv->picked != mv->stmt && strcmp(mv->picked, mv->stmt) != 0) {
            unsigned own = picked_states(m, mv->stmt_name, mv->stmt, &problems);
            if (own != 0)
                from &= own;
        }
        if (from == 0) {
            print_error("%s: its rows are picked (by %s) from no state named in a WHERE\n",
                        mv->stmt_name, mv->picked_name);
            problems++;
            continue;
        }
        unsigned to = set_states(m, mv->stmt_name, mv->stmt, &problems);
        if (to == 0)
            to = from; /* no status in the SET list: the rows keep their state */
        if (!(from & (1u << mv->from)) || !(to & (1u << mv->to))) {
            print_error("%s: the list says %s -> %s, which its SQL cannot do\n", mv->stmt_name,
                        m->name(mv->from), m->name(mv->to));
            problems++;
        }
        for (int f = 0; f < m->n_states; f++) {
            for (int t = 0; t < m->n_states; t++) {
                if ((from & (1u << f)) && (to & (1u << t)) && !declared(moves, n, mv, f, t)) {
                    print_error("%s: its SQL moves %s -> %s, which the list does not declare\n",
                                mv->stmt_name, m->name(f), m->name(t));
                    problems++;
                }
            }
        }
    }
    for (int f = 0; whole_table && f < m->n_states; f++) {
        for (int t = 0; t < m->n_states; t++) {
            bool used = false;
            for (size_t i = 0; i < n; i++)
                used = used || (moves[i].from == f && moves[i].to == t);
            if (m->can_move(f, t) && !used) {
                print_error("%s: the state machine allows %s -> %s but no statement does it\n",
                            m->table, m->name(f), m->name(t));
                problems++;
            }
        }
    }
    return problems;
}

/* ---- the real lists ---- */

static void test_outbox_statements_match_the_state_machine(void **state)
{
    (void)state;
    assert_int_equal(check_moves(&outbox, outbox_moves, TXO_ARRAY_LEN(outbox_moves), true), 0);
}

static void test_cmdq_statements_match_the_state_machine(void **state)
{
    (void)state;
    assert_int_equal(check_moves(&cmdq, cmdq_moves, TXO_ARRAY_LEN(cmdq_moves), true), 0);
}

static void test_order_statements_match_the_state_machine(void **state)
{
    (void)state;
    assert_int_equal(check_moves(&orders, order_moves, TXO_ARRAY_LEN(order_moves), true), 0);
}

/* True when sql says `<name> = ?` for the status column (a bound state). */
static bool binds_status(const char *begin, const char *end)
{
    for (const char *p = begin; p != NULL && p < end; p = strstr(p + 1, "status = ?"))
        if (p >= begin && strncmp(p, "status = ?", 10) == 0 && p < end)
            return true;
    return false;
}

/* True when [begin, end) says `remote_state = ?` (a bound remote state). */
static bool binds_remote(const char *begin, const char *end)
{
    const char *p = strstr(begin, "remote_state = ?");
    return p != NULL && p < end;
}

/* True when [begin, end) writes the column remote_state at all. */
static bool writes_remote(const char *begin, const char *end)
{
    const char *p = strstr(begin, "remote_state");
    return p != NULL && p < end;
}

/* True when the list has an entry for stmt_name and machine. */
static bool saga_listed(const struct saga_move *moves, size_t n, const char *stmt_name,
                        const char *machine)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(moves[i].stmt_name, stmt_name) == 0 && strcmp(moves[i].machine, machine) == 0)
            return true;
    return false;
}

/* Every disagreement between a saga moves list and its SQL; 0 when none. */
static int check_saga_moves(const struct saga_move *moves, size_t n)
{
    int problems = 0;
    struct move literal[32];
    size_t n_literal = 0;
    for (size_t i = 0; i < n; i++) {
        const struct saga_move *m = &moves[i];
        const char *set, *set_end, *where;
        clauses(m->stmt, &set, &set_end, &where);
        if (m->from != TXO_SAGA_BOUND) {
            if (strcmp(m->machine, "saga") != 0 || n_literal == TXO_ARRAY_LEN(literal)) {
                print_error("%s: literal moves are checked for saga_instances only\n",
                            m->stmt_name);
                problems++;
                continue;
            }
            literal[n_literal++] =
                (struct move){m->stmt_name, m->stmt, m->stmt_name, m->stmt, m->from, m->to};
        } else if (strcmp(m->machine, "remote") == 0) {
            if (!binds_remote(set, set_end)) {
                print_error("%s: listed for the remote state, but its SET does not bind "
                            "remote_state\n",
                            m->stmt_name);
                problems++;
            }
        } else if (!binds_status(set, set_end) || !binds_status(where, m->stmt + strlen(m->stmt))) {
            print_error("%s: its states are declared BOUND but its SQL does not bind them\n",
                        m->stmt_name);
            problems++;
        }
        /* A statement that writes remote_state is a move of the remote machine, too. */
        if (writes_remote(set, set_end) && !saga_listed(moves, n, m->stmt_name, "remote")) {
            print_error("%s: writes remote_state but is not listed for the remote machine\n",
                        m->stmt_name);
            problems++;
        }
    }
    return problems + check_moves(&sagas, literal, n_literal, false);
}

static void test_saga_statements_match_the_state_machine(void **state)
{
    (void)state;
    assert_int_equal(check_saga_moves(saga_moves, TXO_ARRAY_LEN(saga_moves)), 0);
}

/* ---- the checker fails on wrong lists and wrong SQL ---- */

static void test_checker_catches_illegal_and_undeclared_moves(void **state)
{
    (void)state;
    /* Illegal in the table: PUBLISHED is terminal. */
    const struct move published_back[] = {
        {"fake", "UPDATE outbox_events SET status = 'PENDING' WHERE status = 'PUBLISHED'", "fake",
         "UPDATE outbox_events SET status = 'PENDING' WHERE status = 'PUBLISHED'",
         TXO_OUTBOX_PUBLISHED, TXO_OUTBOX_PENDING},
    };
    assert_int_equal(check_moves(&outbox, published_back, 1, false), 1);

    /* The list declares a legal move but the SQL makes another one. */
    const char *to_published = "UPDATE outbox_events SET status = 'PUBLISHED' WHERE id = ? "
                               "AND status = 'PENDING'";
    const struct move lie[] = {
        {"fake", to_published, "fake", to_published, TXO_OUTBOX_PENDING, TXO_OUTBOX_PROCESSING},
    };
    assert_true(check_moves(&outbox, lie, 1, false) >= 2); /* cannot do it; does another */

    /* One branch of an IF moves where the list does not say (and the table forbids). */
    const char *if_sql = "UPDATE outbox_events SET status = IF(attempts >= ?, 'PUBLISHED', "
                         "'PENDING') WHERE status = 'PROCESSING'";
    const struct move one_branch[] = {
        {"fake", if_sql, "fake", if_sql, TXO_OUTBOX_PROCESSING, TXO_OUTBOX_PENDING},
    };
    assert_int_equal(check_moves(&outbox, one_branch, 1, false), 1);

    /* An UPDATE whose WHERE names no state, and a state that does not exist. */
    const char *by_id = "UPDATE command_queue SET status = 'DONE' WHERE id = ?";
    const struct move no_source[] = {
        {"fake", by_id, "fake", by_id, TXO_CMDQ_PROCESSING, TXO_CMDQ_DONE},
    };
    assert_int_equal(check_moves(&cmdq, no_source, 1, false), 1);
    const char *typo = "UPDATE command_queue SET status = 'DONNE' WHERE status = 'PROCESSING'";
    const struct move bad_name[] = {
        {"fake", typo, "fake", typo, TXO_CMDQ_PROCESSING, TXO_CMDQ_DONE},
    };
    assert_true(check_moves(&cmdq, bad_name, 1, false) >= 1);

    /* Rows picked by a SELECT in a state the list does not declare. */
    const char *mark = "UPDATE command_queue SET status = 'PROCESSING' WHERE id IN (?)";
    const char *pick = "SELECT id FROM command_queue WHERE status IN ('PENDING', 'DONE') LIMIT ?";
    const struct move wide_pick[] = {
        {"fake", mark, "picker", pick, TXO_CMDQ_PENDING, TXO_CMDQ_PROCESSING},
    };
    assert_int_equal(check_moves(&cmdq, wide_pick, 1, false), 1);

    /* A move the table allows that no statement makes. */
    assert_true(check_moves(&outbox, outbox_moves, TXO_ARRAY_LEN(outbox_moves) - 1, true) >= 1);

    /* A saga statement that writes remote_state without being listed for it, and one listed
     * for it that does not bind it. */
    const char *writes = "UPDATE saga_steps SET status = ?, remote_state = ? WHERE status = ?";
    const struct saga_move unlisted[] = {{"fake", writes, "step", TXO_SAGA_BOUND, TXO_SAGA_BOUND}};
    assert_int_equal(check_saga_moves(unlisted, 1), 1);
    const char *no_remote = "UPDATE saga_steps SET status = ? WHERE status = ?";
    const struct saga_move lies[] = {{"fake", no_remote, "remote", TXO_SAGA_BOUND, TXO_SAGA_BOUND}};
    assert_int_equal(check_saga_moves(lies, 1), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outbox_statements_match_the_state_machine),
        cmocka_unit_test(test_cmdq_statements_match_the_state_machine),
        cmocka_unit_test(test_order_statements_match_the_state_machine),
        cmocka_unit_test(test_saga_statements_match_the_state_machine),
        cmocka_unit_test(test_checker_catches_illegal_and_undeclared_moves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
