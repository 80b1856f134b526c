/*
 * Named crash points for the fault tests (include/txo/crash.h). A test starts `txo` with
 * TXO_CRASH_POINT=relay.after_publish; when the code then passes
 * txo_crash_point("relay.after_publish"), the process SIGKILLs itself, with no cleanup and no
 * flushed buffers, which is the closest a test gets to pulling the power on one process.
 *
 * Data: `armed` points to the name of the armed point, or is NULL when none is. Names are
 * interned in a list that is only ever appended to and never freed, so a pointer read from
 * `armed` stays valid whatever txo_crash_point_set() does at the same time, and re-arming a
 * name already seen allocates nothing. The list holds one node per distinct name, so its size
 * is bounded by the names a test uses. `passes_left` counts the passes to let through before
 * the crash.
 *
 * Thread-safety: txo_crash_point() is lock-free (one atomic load when disarmed) and may run
 * on any thread. txo_crash_point_set() is for start-up; concurrent calls are serialised by
 * intern_lock but a point passed meanwhile may see the old name with the new count.
 */
#include "core/common.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

struct interned_name {
    struct interned_name *next;
    char name[]; /* immutable once the node is linked */
};

static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
static struct interned_name *interned; /* guarded by intern_lock; nodes are never freed */

static _Atomic(const char *) armed;
static _Atomic unsigned passes_left;

/* Returns the interned copy of name, or NULL when out of memory. */
static const char *intern(const char *name)
{
    const char *result = NULL;

    pthread_mutex_lock(&intern_lock);
    for (struct interned_name *n = interned; n != NULL; n = n->next) {
        if (strcmp(n->name, name) == 0) {
            result = n->name;
            goto out;
        }
    }
    size_t len = strlen(name);
    struct interned_name *node = txo_malloc(sizeof(*node) + len + 1);
    if (node == NULL) {
        goto out;
    }
    memcpy(node->name, name, len + 1);
    node->next = interned;
    interned = node;
    result = node->name;
out:
    pthread_mutex_unlock(&intern_lock);
    return result;
}

void txo_crash_point_set(const char *name, unsigned after)
{
    /* Disarm first so no pass sees the new count with the old name. */
    atomic_store_explicit(&armed, NULL, memory_order_release);
    if (name == NULL || name[0] == '\0') {
        return;
    }

    const char *copy = intern(name);
    if (copy == NULL) {
        /* A fault test then sees no crash and fails, which is what should happen. */
        TXO_LOG(TXO_LOG_ERROR, "crash", "cannot arm crash point: out of memory",
                TXO_KV_STR("name", name));
        return;
    }
    atomic_store_explicit(&passes_left, after, memory_order_relaxed);
    atomic_store_explicit(&armed, copy, memory_order_release);
    TXO_LOG(TXO_LOG_INFO, "crash", "crash point armed", TXO_KV_STR("name", copy),
            TXO_KV_U64("after", after));
}

void txo_crash_point(const char *name)
{
    const char *target = atomic_load_explicit(&armed, memory_order_acquire);

    if (target == NULL || name == NULL || strcmp(target, name) != 0) {
        return;
    }

    /* Let `after` passes through; the pass that finds the count at 0 crashes. */
    unsigned left = atomic_load_explicit(&passes_left, memory_order_relaxed);
    while (left > 0) {
        if (atomic_compare_exchange_weak_explicit(&passes_left, &left, left - 1,
                                                  memory_order_relaxed, memory_order_relaxed)) {
            return;
        }
    }

    TXO_LOG(TXO_LOG_ERROR, "crash", "crash point hit", TXO_KV_STR("name", name));
    kill(getpid(), SIGKILL);
    /* SIGKILL cannot be caught or blocked; never run past the crash point meanwhile. */
    for (;;) {
        pause();
    }
}
