/*
 * libFuzzer harness of the canonical-JSON request hash (txo_idem_hash). Whenever a body
 * hashes, the same document written differently (keys in another order, other whitespace:
 * jansson's re-serialisation, sorted and indented) must give the same hash, and another
 * path must give another one.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "txo/txo.h"

static void check(bool ok)
{
    if (!ok)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct txo_error err;
    txo_error_init(&err);
    char h1[TXO_IDEM_HASH_LEN];
    if (txo_idem_hash("POST", "/orders", (const char *)data, size, h1, &err) != 0) {
        check(err.code == TXO_EINVAL);
        return 0;
    }
    check(strlen(h1) == 64);
    json_t *doc =
        json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    check(doc != NULL);
    char *again = json_dumps(doc, JSON_ENCODE_ANY | JSON_SORT_KEYS | JSON_INDENT(3));
    json_decref(doc);
    if (again == NULL)
        return 0; /* a value jansson reads but does not write back (NUL in a string) */
    char h2[TXO_IDEM_HASH_LEN];
    check(txo_idem_hash("POST", "/orders", again, strlen(again), h2, &err) == 0);
    check(strcmp(h1, h2) == 0);
    char h3[TXO_IDEM_HASH_LEN];
    check(txo_idem_hash("POST", "/orders/", again, strlen(again), h3, &err) == 0);
    check(strcmp(h1, h3) != 0);
    free(again);
    return 0;
}
