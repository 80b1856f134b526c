/*
 * Owner names: how a process (and a role inside it) names itself in lease columns such as
 * outbox_events.locked_by, command_queue.locked_by and saga_instances.owner, so that an
 * operator reading a row can tell which host and process holds it.
 *
 * Thread-safety: txo_owner_name() writes only to the caller's buffer; any thread.
 */
#ifndef TXO_OWNER_H
#define TXO_OWNER_H

#include <stddef.h>

#include "txo/common.h"

/*
 * Writes "<hostname>:<pid>" into buf, or "<hostname>:<pid>:<suffix>" when suffix is neither
 * NULL nor empty ("host1:4242:commands"). The host name is "localhost" when gethostname()
 * fails. Returns 0, or TXO_EINVAL when buf is NULL or the name does not fit in cap bytes
 * (NUL included); buf is then left as it was.
 */
TXO_API TXO_MUST_CHECK int txo_owner_name(char *buf, size_t cap, const char *suffix);

#endif
