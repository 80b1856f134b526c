#include "core/common.h"

/*
 * Owner names (include/txo/owner.h): the one place that turns this host and process into the
 * name written to lease columns, so the relay, the saga engine and the worker name themselves
 * the same way.
 *
 * Thread-safety: gethostname() and getpid() only, into a caller-owned buffer.
 */

#include <unistd.h>

#include "txo/owner.h"

int txo_owner_name(char *buf, size_t cap, const char *suffix)
{
    if (buf == NULL)
        return TXO_EINVAL;
    char host[256];
    if (gethostname(host, sizeof(host)) != 0 || host[0] == '\0')
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0'; /* gethostname() need not terminate a cut name */
    char name[512];
    int n;
    if (suffix != NULL && suffix[0] != '\0')
        n = snprintf(name, sizeof(name), "%s:%ld:%s", host, (long)getpid(), suffix);
    else
        n = snprintf(name, sizeof(name), "%s:%ld", host, (long)getpid());
    if (n < 0 || (size_t)n >= cap || (size_t)n >= sizeof(name))
        return TXO_EINVAL;
    memcpy(buf, name, (size_t)n + 1);
    return 0;
}
