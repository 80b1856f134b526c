/*
 * W3C Trace Context values (include/txo/trace.h): parsing what arrives, making new ids,
 * formatting what is sent on.
 *
 * Parsing follows the specification's processing model: a version-00 traceparent is exactly
 * 55 characters; a higher version is read as far as version 00's fields go, and must then end
 * or go on with '-'; version ff, hex that is not lower-case and all-zero ids are refused. A
 * tracestate is split into list members (empty ones and the blanks around members are
 * dropped), each checked against the key and value grammar; more than 32 members, a duplicate
 * key or one bad member drops the whole tracestate. A valid one longer than
 * TXO_TRACESTATE_MAX is cut as the specification suggests: members longer than 128 bytes go
 * first, then members from the end.
 *
 * Ids are random (the specification's "random-trace-id" expectation): a per-thread
 * xoshiro256** generator seeded from getrandom(2), so making an id is a few instructions and
 * never a system call after the first.
 */
#include "core/common.h"

#include <sys/random.h>
#include <time.h>

#include "trace/trace_params.h"
#include "txo/trace.h"

#define TRACESTATE_MEMBERS_MAX 32
#define TRACESTATE_CUT_FIRST   128 /* members longer than this are dropped first when cutting */

/* ---- ids ---- */

static _Thread_local uint64_t rng[4];
static _Thread_local bool rng_seeded;

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static void rng_seed(void)
{
    if (getrandom(rng, sizeof(rng), GRND_NONBLOCK) != (ssize_t)sizeof(rng)) {
        /* No entropy yet (early boot): the time, the thread and the address space still make
         * the ids of two processes differ; trace ids need to be unique, not secret. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        rng[0] = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        rng[1] = (uint64_t)(uintptr_t)&ts;
        rng[2] = (uint64_t)(uintptr_t)&rng_seeded ^ 0x9e3779b97f4a7c15ULL;
        rng[3] = rng[0] ^ 0xbf58476d1ce4e5b9ULL;
    }
    if ((rng[0] | rng[1] | rng[2] | rng[3]) == 0)
        rng[0] = 1; /* xoshiro's one bad state */
    rng_seeded = true;
}

static uint64_t rng_next(void)
{
    if (!rng_seeded)
        rng_seed();
    uint64_t result = rotl(rng[1] * 5, 7) * 9;
    uint64_t t = rng[1] << 17;
    rng[2] ^= rng[0];
    rng[3] ^= rng[1];
    rng[1] ^= rng[2];
    rng[0] ^= rng[3];
    rng[2] ^= t;
    rng[3] = rotl(rng[3], 45);
    return result;
}

static bool all_zero(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return false;
    return true;
}

/* Fills b[0..n) (n a multiple of 8) with random bytes, never all zero. */
static void random_id(uint8_t *b, size_t n)
{
    do {
        for (size_t i = 0; i < n; i += 8) {
            uint64_t v = rng_next();
            memcpy(b + i, &v, 8);
        }
    } while (all_zero(b, n));
}

void txo_trace_new_root(bool sampled, struct txo_trace_ctx *out)
{
    random_id(out->trace_id, sizeof(out->trace_id));
    random_id(out->span_id, sizeof(out->span_id));
    out->flags = sampled ? TXO_TRACE_SAMPLED : 0;
    out->state[0] = '\0';
}

void txo_trace_child(const struct txo_trace_ctx *parent, struct txo_trace_ctx *out)
{
    if (out != parent)
        *out = *parent;
    random_id(out->span_id, sizeof(out->span_id));
}

/* ---- text ---- */

static const char hex_digits[] = "0123456789abcdef";

static void to_hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex_digits[b[i] >> 4];
        out[2 * i + 1] = hex_digits[b[i] & 0x0f];
    }
    out[2 * n] = '\0';
}

void txo_trace_id_hex(const struct txo_trace_ctx *ctx, char *out)
{
    to_hex(ctx->trace_id, sizeof(ctx->trace_id), out);
}

void txo_trace_span_hex(const struct txo_trace_ctx *ctx, char *out)
{
    to_hex(ctx->span_id, sizeof(ctx->span_id), out);
}

void txo_trace_format(const struct txo_trace_ctx *ctx, char *out)
{
    memcpy(out, "00-", 3);
    to_hex(ctx->trace_id, sizeof(ctx->trace_id), out + 3);
    out[35] = '-';
    to_hex(ctx->span_id, sizeof(ctx->span_id), out + 36);
    out[52] = '-';
    uint8_t flags = ctx->flags;
    to_hex(&flags, 1, out + 53);
}

/* Lower-case hex only, as the grammar's HEXDIGLC: 0..15, or -1. */
static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Reads 2n lower-case hex digits of s into b[0..n). */
static bool from_hex(const char *s, uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hex_value(s[2 * i]), lo = hex_value(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

/* ---- traceparent ---- */

/* s[0..len) with HTTP's optional blanks around it already cut. */
static bool parse_traceparent(const char *s, size_t len, struct txo_trace_ctx *out)
{
    uint8_t version;
    if (len < TXO_TRACEPARENT_LEN || !from_hex(s, &version, 1) || version == 0xff)
        return false;
    if (version == 0 && len != TXO_TRACEPARENT_LEN)
        return false;
    if (version != 0 && len > TXO_TRACEPARENT_LEN && s[TXO_TRACEPARENT_LEN] != '-')
        return false; /* a later version may add fields, always after a dash */
    if (s[2] != '-' || s[35] != '-' || s[52] != '-')
        return false;
    if (!from_hex(s + 3, out->trace_id, sizeof(out->trace_id)) ||
        !from_hex(s + 36, out->span_id, sizeof(out->span_id)) || !from_hex(s + 53, &out->flags, 1))
        return false;
    if (all_zero(out->trace_id, sizeof(out->trace_id)) ||
        all_zero(out->span_id, sizeof(out->span_id)))
        return false;
    if (version != 0)
        out->flags &= TXO_TRACE_SAMPLED; /* only version 00's flag is understood */
    return true;
}

/* ---- tracestate ---- */

static bool lcalpha(char c)
{
    return c >= 'a' && c <= 'z';
}

static bool key_char(char c)
{
    return lcalpha(c) || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' || c == '/';
}

/*
 * key = simple-key / multi-tenant-key
 *   simple-key       = lcalpha 0*255(lcalpha / DIGIT / "_" / "-" / "*" / "/")
 *   multi-tenant-key = tenant-id "@" system-id
 *   tenant-id        = (lcalpha / DIGIT) 0*240(lcalpha / DIGIT / "_" / "-" / "*" / "/")
 *   system-id        = lcalpha 0*13(lcalpha / DIGIT / "_" / "-" / "*" / "/")
 */
static bool valid_key(const char *k, size_t n)
{
    const char *at = memchr(k, '@', n);
    if (at == NULL) {
        if (n < 1 || n > 256 || !lcalpha(k[0]))
            return false;
        for (size_t i = 1; i < n; i++)
            if (!key_char(k[i]))
                return false;
        return true;
    }
    size_t tenant = (size_t)(at - k), system = n - tenant - 1;
    if (tenant < 1 || tenant > 241 || system < 1 || system > 14)
        return false;
    if (!lcalpha(k[0]) && !(k[0] >= '0' && k[0] <= '9'))
        return false;
    for (size_t i = 1; i < tenant; i++)
        if (!key_char(k[i]))
            return false;
    if (!lcalpha(at[1]))
        return false;
    for (size_t i = 2; i <= system; i++)
        if (!key_char(at[i]))
            return false;
    return true;
}

/* value = 0*255(chr) nblk-chr; nblk-chr = %x21-2B / %x2D-3C / %x3E-7E; chr = %x20 / nblk-chr */
static bool valid_value(const char *v, size_t n)
{
    if (n < 1 || n > 256 || v[n - 1] == ' ')
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c < 0x20 || c > 0x7e || c == ',' || c == '=')
            return false;
    }
    return true;
}

struct member {
    const char *s;
    size_t len;     /* "key=value" */
    size_t key_len; /* bytes before '=' */
};

/* Splits and checks a tracestate; false when it must be dropped. */
static bool split_tracestate(const char *s, struct member *m, size_t *n_out)
{
    size_t n = 0;
    while (*s != '\0') {
        const char *end = strchr(s, ',');
        size_t len = end != NULL ? (size_t)(end - s) : strlen(s);
        const char *a = s, *b = s + len;
        while (a < b && blank(*a))
            a++;
        while (b > a && blank(b[-1]))
            b--;
        if (a < b) { /* an empty member is allowed and dropped */
            if (n == TRACESTATE_MEMBERS_MAX)
                return false;
            const char *eq = memchr(a, '=', (size_t)(b - a));
            if (eq == NULL || !valid_key(a, (size_t)(eq - a)) ||
                !valid_value(eq + 1, (size_t)(b - eq - 1)))
                return false;
            for (size_t k = 0; k < n; k++)
                if (m[k].key_len == (size_t)(eq - a) && memcmp(m[k].s, a, m[k].key_len) == 0)
                    return false; /* a key appears once */
            m[n++] = (struct member){.s = a, .len = (size_t)(b - a), .key_len = (size_t)(eq - a)};
        }
        if (end == NULL)
            break;
        s = end + 1;
    }
    *n_out = n;
    return true;
}

/* The members kept[] joined with ',' into out (room for TXO_TRACESTATE_MAX + 1). */
static void join_members(const struct member *m, const bool *kept, size_t n, char *out)
{
    size_t at = 0;
    for (size_t k = 0; k < n; k++) {
        if (!kept[k])
            continue;
        if (at > 0)
            out[at++] = ',';
        memcpy(out + at, m[k].s, m[k].len);
        at += m[k].len;
    }
    out[at] = '\0';
}

/* The length of the members kept[] joined with ','. */
static size_t joined_len(const struct member *m, const bool *kept, size_t n)
{
    size_t total = 0, kept_n = 0;
    for (size_t k = 0; k < n; k++)
        if (kept[k]) {
            total += m[k].len;
            kept_n++;
        }
    return total + (kept_n > 0 ? kept_n - 1 : 0);
}

static void parse_tracestate(const char *s, char *out)
{
    struct member m[TRACESTATE_MEMBERS_MAX];
    bool kept[TRACESTATE_MEMBERS_MAX];
    size_t n = 0;
    out[0] = '\0';
    if (s == NULL || !split_tracestate(s, m, &n))
        return;
    for (size_t k = 0; k < n; k++)
        kept[k] = true;
    /* Too long: the members over 128 bytes go first (from the end), then the last ones. */
    for (size_t k = n; joined_len(m, kept, n) > TXO_TRACESTATE_MAX && k-- > 0;)
        kept[k] = kept[k] && m[k].len <= TRACESTATE_CUT_FIRST;
    for (size_t k = n; joined_len(m, kept, n) > TXO_TRACESTATE_MAX && k-- > 0;)
        kept[k] = false;
    join_members(m, kept, n, out);
}

bool txo_trace_parse(const char *traceparent, const char *tracestate, struct txo_trace_ctx *out)
{
    if (traceparent == NULL)
        return false;
    const char *a = traceparent, *b = traceparent + strlen(traceparent);
    while (a < b && blank(*a))
        a++;
    while (b > a && blank(b[-1]))
        b--;
    struct txo_trace_ctx c;
    if (!parse_traceparent(a, (size_t)(b - a), &c))
        return false;
    parse_tracestate(tracestate, c.state);
    *out = c;
    return true;
}

/* ---- the current span of each thread ---- */

static _Thread_local const struct txo_trace_ctx *current;

const struct txo_trace_ctx *txo_trace_set_current(const struct txo_trace_ctx *ctx)
{
    const struct txo_trace_ctx *prev = current;
    current = ctx;
    return prev;
}

const struct txo_trace_ctx *txo_trace_current(void)
{
    return current;
}

/* trace_params.h. */
void txo__trace_params(const struct txo_trace_ctx *trace, char tp[TXO_TRACEPARENT_LEN + 1],
                       struct txo_param p[2])
{
    p[0] = txo_p_null();
    p[1] = txo_p_null();
    if (trace == NULL)
        return;
    txo_trace_format(trace, tp);
    p[0] = txo_p_str(tp);
    if (trace->state[0] != '\0')
        p[1] = txo_p_str(trace->state);
}
