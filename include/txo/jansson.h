/*
 * The library's calls that take a jansson document (json_t), for programs that build or parse
 * their JSON with jansson, as the order service does. They live apart so that the other public
 * headers name no third-party type and a program that uses none of these needs no jansson
 * headers to compile (libtxo links jansson either way). Not included by txo/txo.h.
 */
#ifndef TXO_JANSSON_H
#define TXO_JANSSON_H

#include <jansson.h>

#include "txo/common.h"
#include "txo/err.h"
#include "txo/http_server.h"
#include "txo/idempotency.h"

/*
 * txo_idem_hash() for a body the caller has already parsed (to validate it): the same hash of
 * "<method> <path>\n<canonical JSON of doc>", with no second parse. doc is borrowed.
 * Errors: TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_idem_hash_doc(const char *method, const char *path,
                                             const json_t *doc, char out[TXO_IDEM_HASH_LEN],
                                             struct txo_error *err);

/*
 * Answers status with the JSON document doc as compact text, keys in insertion order. The
 * reference to doc is stolen (json_decref'd here). doc NULL means json_pack() refused its
 * input, a bug of the caller: answered 500 internal and logged, as is a failed allocation.
 */
TXO_API void txo_http_response_json(struct txo_http_response *resp, int status, json_t *doc);

#endif
