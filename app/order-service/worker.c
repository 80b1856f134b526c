/*
 * The order service's handlers for the library worker (worker.h). Everything generic (inbox,
 * threads, retries, resumption) is the library's; what is left here is what only the order
 * service knows: which event and command start its saga, and what a saga run needs.
 */
#include <inttypes.h>
#include <string.h>

#include <jansson.h>

#include "txo/alloc.h"
#include "txo/log.h"
#include "order_services.h"
#include "worker.h"

/*
 * Reads the order id of an order payload (the OrderCreated payload, which is also the saga
 * payload) and whether it asks for its saga to be started by command. TXO_EINVAL (permanent:
 * the message can never succeed) when the payload is not an order.
 */
static int read_order(const char *payload, size_t len, int64_t *order_id, bool *by_command,
                      struct txo_error *err)
{
    json_error_t jerr;
    json_t *doc = json_loadb(payload, len, 0, &jerr);
    json_t *id = json_object_get(doc, "order_id");
    int rc = 0;
    if (!json_is_integer(id) || json_integer_value(id) <= 0) {
        rc = txo_error_set(err, TXO_EINVAL, "order payload without a positive order_id%s%s",
                           doc == NULL ? ": " : "", doc == NULL ? jerr.text : "");
    } else {
        *order_id = (int64_t)json_integer_value(id);
        const char *start = json_string_value(json_object_get(doc, "saga_start"));
        *by_command = start != NULL && strcmp(start, "command") == 0;
    }
    json_decref(doc);
    return rc;
}

/* Starts the order's saga in the handler's transaction, from the order payload. */
static int start_saga(struct txo_handler_ctx *hc, int64_t order_id, const char *payload,
                      struct txo_error *err)
{
    const struct order_worker_config *cfg = txo_handler_arg(hc);
    char correlation[64];
    snprintf(correlation, sizeof(correlation), "order:%" PRId64, order_id);
    return txo_handler_start_saga(hc, cfg->sagas[ORDER_SAGA_CREATE_ORDER], correlation, payload,
                                  NULL, err);
}

static int on_order_created(struct txo_tx *tx, const struct txo_event *ev,
                            struct txo_handler_ctx *hc, struct txo_error *err)
{
    (void)tx;
    int64_t order_id = 0;
    bool by_command = false;
    int rc = read_order(ev->payload, ev->payload_len, &order_id, &by_command, err);
    if (rc != 0 || by_command)
        return rc; /* by_command: StartOrderSaga starts it */
    return start_saga(hc, order_id, ev->payload, err);
}

static int on_start_order_saga(struct txo_tx *tx, const struct txo_command *cmd,
                               struct txo_handler_ctx *hc, struct txo_error *err)
{
    (void)tx;
    int64_t order_id = 0;
    bool by_command = false;
    int rc = read_order(cmd->payload, strlen(cmd->payload), &order_id, &by_command, err);
    if (rc != 0)
        return rc;
    return start_saga(hc, order_id, cmd->payload, err);
}

static const struct txo_event_handler events[] = {
    {.event_type = "OrderCreated", .fn = on_order_created},
};

static const struct txo_command_handler commands[] = {
    {.command_type = ORDERS_START_SAGA_COMMAND, .fn = on_start_order_saga},
};

/* The definition of each saga slot (worker.h), with remote parts when services call any. */
static const struct txo_saga_def *(*const saga_defs[ORDER_SAGA_SLOTS])(
    const struct order_services *services) = {
    [ORDER_SAGA_CREATE_ORDER] = order_saga_def_for,
};

/* One struct order_saga_env per runner thread, with its own HTTP session to the services. */
static void *runner_env_new(void *arg)
{
    const struct order_worker_config *cfg = arg;
    struct order_saga_env *env = txo_calloc(1, sizeof(*env));
    if (env == NULL) {
        TXO_LOG(TXO_LOG_ERROR, "worker", "no memory for a saga runner's environment");
        return NULL;
    }
    order_saga_env_init(env, cfg->faults);
    if (cfg->services != NULL) {
        struct txo_error err;
        txo_error_init(&err);
        if (order_service_session_new(cfg->services, &env->session, &err) != 0)
            TXO_LOG(TXO_LOG_ERROR, "worker", "no external service session",
                    TXO_KV_STR("err", err.msg));
    }
    return env;
}

static void runner_env_free(void *user)
{
    struct order_saga_env *env = user;
    if (env == NULL)
        return;
    order_service_session_free(env->session);
    txo_free(env);
}

void order_worker_setup(struct order_worker_config *cfg, const struct order_services *services,
                        const struct order_faults *faults, struct txo_worker_opts *wo)
{
    cfg->services = services;
    cfg->faults = faults;
    for (size_t i = 0; i < ORDER_SAGA_SLOTS; i++)
        cfg->sagas[i] = saga_defs[i](services);
    wo->events = events;
    wo->n_events = TXO_ARRAY_LEN(events);
    wo->commands = commands;
    wo->n_commands = TXO_ARRAY_LEN(commands);
    wo->sagas = cfg->sagas;
    wo->n_sagas = TXO_ARRAY_LEN(cfg->sagas);
    wo->handler_arg = cfg;
    wo->runner_user_new = runner_env_new;
    wo->runner_user_free = runner_env_free;
    wo->runner_user_arg = cfg;
}
