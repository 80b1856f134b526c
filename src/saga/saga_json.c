/*
 * The JSON view of a persisted saga (txo_saga_info_json), shared by `txo saga show` and the
 * HTTP API's GET /sagas/{id} so both print the same document.
 */
#include "core/common.h"

#include <jansson.h>

static json_t *str_or_null(const char *s)
{
    return s != NULL ? json_string(s) : json_null();
}

/* A time of txo_saga_info ("" when unset) as a string or null. */
static json_t *time_or_null(const char *t)
{
    return t[0] != '\0' ? json_string(t) : json_null();
}

char *txo_saga_info_json(const struct txo_saga_info *info, struct txo_error *err)
{
    json_t *steps = json_array();
    json_t *doc = json_object();
    char *out = NULL;
    if (steps == NULL || doc == NULL)
        goto out;
    for (size_t i = 0; i < info->n_steps; i++) {
        const struct txo_saga_step_info *st = &info->steps[i];
        json_t *step = json_pack(
            "{s:I,s:s,s:s,s:I,s:o,s:o,s:s,s:o}", "step", (json_int_t)st->step_order, "name",
            st->name, "status", txo_step_status_name(st->status), "attempts",
            (json_int_t)st->attempts, "error", str_or_null(st->error), "error_code",
            st->error_code != 0 ? json_integer(st->error_code) : json_null(), "remote",
            txo_remote_state_name(st->remote), "deadline_at", time_or_null(st->deadline_at));
        if (step == NULL || json_array_append_new(steps, step) != 0)
            goto out;
    }
    json_t *payload =
        info->payload != NULL ? json_loads(info->payload, JSON_DECODE_ANY, NULL) : NULL;
    if (json_object_set_new(doc, "saga_id", json_string(info->id)) != 0 ||
        json_object_set_new(doc, "saga_type", str_or_null(info->type)) != 0 ||
        json_object_set_new(doc, "correlation_id", str_or_null(info->correlation_id)) != 0 ||
        json_object_set_new(doc, "status", json_string(txo_saga_status_name(info->status))) != 0 ||
        json_object_set_new(doc, "owner", str_or_null(info->owner)) != 0 ||
        json_object_set_new(doc, "compensation_tries",
                            json_integer((json_int_t)info->compensation_tries)) != 0 ||
        json_object_set_new(doc, "retry_scheduled", json_boolean(info->retry_scheduled)) != 0 ||
        json_object_set_new(doc, "deadline_at", time_or_null(info->deadline_at)) != 0 ||
        json_object_set_new(doc, "created_at", time_or_null(info->created_at)) != 0 ||
        json_object_set_new(doc, "updated_at", time_or_null(info->updated_at)) != 0 ||
        json_object_set_new(doc, "payload", payload != NULL ? payload : json_null()) != 0 ||
        json_object_set(doc, "steps", steps) != 0)
        goto out;
    char *dumped = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (dumped != NULL) {
        out = txo_strdup(dumped);
        free(dumped); /* jansson allocates with malloc */
    }
out:
    json_decref(steps);
    json_decref(doc);
    if (out == NULL)
        txo_error_set(err, TXO_ENOMEM, "JSON of saga %s", info->id);
    return out;
}
