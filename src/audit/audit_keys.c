#include "core/common.h"

/*
 * The memory of one audit (audit_internal.h): an arena for the strings it keeps (keys, broker
 * positions), freed in one call at the end, and a set of idempotency keys with dense indexes,
 * an open-addressing hash table over FNV-1a. A window of a million events costs its keys'
 * bytes plus about 24 bytes per key here.
 *
 * Invariants: n_slots is 0 or a power of two, at least twice n (so a probe always ends at an
 * empty slot); every key of keys[] is in exactly one slot.
 */

#include "audit/audit_internal.h"
#include "core/text.h"

#define CHUNK_BYTES (64 * 1024)
#define FIRST_SLOTS 1024

struct audit_chunk {
    struct audit_chunk *next;
    size_t used, cap;
    char data[];
};

char *txo__audit_arena_strndup(struct audit_arena *ar, const char *s, size_t len)
{
    struct audit_chunk *c = ar->head;
    if (c == NULL || c->cap - c->used < len + 1) {
        size_t cap = len + 1 > CHUNK_BYTES ? len + 1 : CHUNK_BYTES;
        c = txo_malloc(sizeof(*c) + cap);
        if (c == NULL)
            return NULL;
        c->next = ar->head;
        c->used = 0;
        c->cap = cap;
        ar->head = c;
    }
    char *p = c->data + c->used;
    memcpy(p, s, len);
    p[len] = '\0';
    c->used += len + 1;
    return p;
}

void txo__audit_arena_release(struct audit_arena *ar)
{
    while (ar->head != NULL) {
        struct audit_chunk *next = ar->head->next;
        txo_free(ar->head);
        ar->head = next;
    }
}

/* The slot that holds key, or the empty slot where it would go. */
static size_t probe(const struct audit_keys *ks, const char *key, size_t len)
{
    size_t mask = ks->n_slots - 1;
    for (size_t s = (size_t)txo__fnv1a(TXO__FNV1A_BASIS, key, len) & mask;; s = (s + 1) & mask) {
        uint32_t v = ks->slots[s];
        if (v == 0)
            return s;
        const char *k = ks->keys[v - 1];
        if (strlen(k) == len && memcmp(k, key, len) == 0)
            return s;
    }
}

static int grow_slots(struct audit_keys *ks)
{
    size_t n_slots = ks->n_slots == 0 ? FIRST_SLOTS : ks->n_slots * 2;
    uint32_t *slots = txo_calloc(n_slots, sizeof(*slots));
    if (slots == NULL)
        return TXO_ENOMEM;
    uint32_t *old = ks->slots;
    ks->slots = slots;
    ks->n_slots = n_slots;
    for (size_t i = 0; i < ks->n; i++)
        slots[probe(ks, ks->keys[i], strlen(ks->keys[i]))] = (uint32_t)(i + 1);
    txo_free(old);
    return 0;
}

int txo__audit_keys_add(struct audit_keys *ks, const char *key, size_t len, size_t *index,
                        bool *added)
{
    *added = false;
    if (ks->n_slots > 0) {
        size_t s = probe(ks, key, len);
        if (ks->slots[s] != 0) {
            *index = ks->slots[s] - 1;
            return 0;
        }
    }
    if (ks->n >= UINT32_MAX - 1)
        return TXO_ENOMEM;
    if (2 * (ks->n + 1) > ks->n_slots && grow_slots(ks) < 0)
        return TXO_ENOMEM;
    if (TXO_ARRAY_RESERVE(ks->keys, ks->cap, ks->n + 1, FIRST_SLOTS) < 0)
        return TXO_ENOMEM;
    char *copy = txo__audit_arena_strndup(&ks->arena, key, len);
    if (copy == NULL)
        return TXO_ENOMEM;
    ks->keys[ks->n] = copy;
    ks->slots[probe(ks, key, len)] = (uint32_t)(ks->n + 1);
    *index = ks->n++;
    *added = true;
    return 0;
}

size_t txo__audit_keys_find(const struct audit_keys *ks, const char *key, size_t len)
{
    if (ks->n_slots == 0)
        return AUDIT_NO_KEY;
    uint32_t v = ks->slots[probe(ks, key, len)];
    return v == 0 ? AUDIT_NO_KEY : v - 1;
}

void txo__audit_keys_release(struct audit_keys *ks)
{
    txo__audit_arena_release(&ks->arena);
    txo_free(ks->keys);
    txo_free(ks->slots);
    memset(ks, 0, sizeof(*ks));
}
