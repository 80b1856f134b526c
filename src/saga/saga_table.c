/*
 * A service's table of saga definitions (saga_table.h): checked once when the worker or the
 * admin API is made, then searched by type for every saga they run or retry.
 */
#include "core/common.h"

#include "saga/saga_table.h"

int txo__saga_table_check(const struct txo_saga_def *const *sagas, size_t n, struct txo_error *err)
{
    if (n > 0 && sagas == NULL)
        return txo_error_set(err, TXO_EINVAL, "saga table given without its entries");
    for (size_t i = 0; i < n; i++) {
        if (sagas[i] == NULL || sagas[i]->type == NULL)
            return txo_error_set(err, TXO_EINVAL, "saga definition %zu has no type", i);
        for (size_t k = 0; k < i; k++)
            if (strcmp(sagas[k]->type, sagas[i]->type) == 0)
                return txo_error_set(err, TXO_EINVAL, "saga type %s registered twice",
                                     sagas[i]->type);
    }
    return 0;
}

const struct txo_saga_def *txo__saga_table_find(const struct txo_saga_def *const *sagas, size_t n,
                                                const char *type)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(sagas[i]->type, type) == 0)
            return sagas[i];
    return NULL;
}
