/* The one table printer and the one JSON path of the listing commands (listing.h). */
#include "listing.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* What a cell shows: its text (owned) and whether it is a number (right-aligned). */
struct cell {
    char *text;
    bool number;
};

static bool utf8_continuation(unsigned char c)
{
    return (c & 0xC0) == 0x80;
}

/* Characters (not bytes) of UTF-8 text. */
static size_t text_width(const char *s)
{
    size_t n = 0;
    for (; *s != '\0'; s++)
        n += !utf8_continuation((unsigned char)*s);
    return n;
}

/* A copy of s with control characters as spaces and, past max_width characters (0: no
 * limit), cut to max_width - 1 of them and "…". NULL when out of memory. */
static char *cell_text(const char *s, size_t max_width)
{
    static const char ellipsis[] = "\xe2\x80\xa6"; /* U+2026, one character wide */
    size_t len = strlen(s);
    char *out = txo_malloc(len + sizeof(ellipsis));
    if (out == NULL)
        return NULL;
    bool cut = max_width > 0 && text_width(s) > max_width;
    size_t keep = cut ? max_width - 1 : (size_t)-1;
    size_t chars = 0, o = 0;
    for (const char *p = s; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (!utf8_continuation(c) && chars++ == keep)
            break;
        out[o++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    if (cut) {
        memcpy(out + o, ellipsis, sizeof(ellipsis) - 1);
        o += sizeof(ellipsis) - 1;
    }
    out[o] = '\0';
    return out;
}

/* The cell of value v (NULL: missing) in a column cut at max_width. */
static struct cell make_cell(const json_t *v, size_t max_width)
{
    char num[64];
    struct cell c = {.text = NULL, .number = false};
    switch (v != NULL ? json_typeof(v) : JSON_NULL) {
    case JSON_STRING:
        c.text = cell_text(json_string_value(v), max_width);
        return c;
    case JSON_INTEGER:
        snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        c.number = true;
        break;
    case JSON_REAL:
        snprintf(num, sizeof(num), "%.3f", json_real_value(v));
        c.number = true;
        break;
    case JSON_TRUE:
        snprintf(num, sizeof(num), "true");
        break;
    case JSON_FALSE:
        snprintf(num, sizeof(num), "false");
        break;
    case JSON_NULL:
        snprintf(num, sizeof(num), "-");
        break;
    case JSON_OBJECT:
    case JSON_ARRAY: {
        char *dumped = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
        c.text = cell_text(dumped != NULL ? dumped : "?", max_width);
        free(dumped); /* jansson allocates with malloc */
        return c;
    }
    }
    c.text = cell_text(num, max_width);
    return c;
}

/* Writes text in a field of width characters, right-aligned or not; the last column of a
 * line gets no padding after it. */
static void put_field(FILE *out, const char *text, size_t width, bool right, bool last)
{
    size_t w = text_width(text);
    size_t pad = w < width ? width - w : 0;
    if (right)
        fprintf(out, "%*s", (int)pad, "");
    fputs(text, out);
    if (!right && !last)
        fprintf(out, "%*s", (int)pad, "");
}

void listing_table(FILE *out, const struct listing_column *cols, size_t n_cols, const json_t *rows)
{
    size_t n_rows = json_array_size(rows);
    struct cell *cells = txo_calloc(n_rows * n_cols + 1, sizeof(*cells));
    size_t *width = txo_calloc(n_cols + 1, sizeof(*width));
    bool *right = txo_calloc(n_cols + 1, sizeof(*right));
    if (cells == NULL || width == NULL || right == NULL) {
        fputs("(out of memory printing the table)\n", out);
        goto out;
    }
    /* An optional column with no value in any row is left out (width 0 marks it). */
    for (size_t c = 0; c < n_cols; c++) {
        bool shown = !cols[c].optional;
        for (size_t r = 0; !shown && r < n_rows; r++) {
            const json_t *v = json_object_get(json_array_get(rows, r), cols[c].key);
            shown = v != NULL && !json_is_null(v);
        }
        width[c] = shown ? text_width(cols[c].header) : 0;
    }
    for (size_t r = 0; r < n_rows; r++) {
        const json_t *row = json_array_get(rows, r);
        for (size_t c = 0; c < n_cols; c++) {
            struct cell *cell = &cells[r * n_cols + c];
            *cell = make_cell(json_object_get(row, cols[c].key), cols[c].max_width);
            if (cell->text == NULL) {
                fputs("(out of memory printing the table)\n", out);
                goto out;
            }
            size_t w = text_width(cell->text);
            width[c] = width[c] == 0 || w <= width[c] ? width[c] : w;
            right[c] = right[c] || cell->number;
        }
    }
    size_t last = 0; /* the last column shown: no padding after it */
    for (size_t c = 0; c < n_cols; c++)
        last = width[c] > 0 ? c : last;
    for (size_t r = 0; r <= n_rows; r++) {
        bool first = true;
        for (size_t c = 0; c < n_cols; c++) {
            if (width[c] == 0)
                continue;
            if (!first)
                fputs("  ", out);
            first = false;
            /* Row 0 is the header. A column of numbers aligns them to the right; "-" (null)
             * goes with them. */
            const char *text = r == 0 ? cols[c].header : cells[(r - 1) * n_cols + c].text;
            put_field(out, text, width[c], right[c], c == last);
        }
        fputc('\n', out);
    }
out:
    for (size_t i = 0; cells != NULL && i < n_rows * n_cols; i++)
        txo_free(cells[i].text);
    txo_free(cells);
    txo_free(width);
    txo_free(right);
}

void listing_record(FILE *out, const struct listing_column *cols, size_t n_cols, const json_t *obj)
{
    size_t width = 0;
    for (size_t c = 0; c < n_cols; c++) {
        size_t w = text_width(cols[c].header);
        width = w > width ? w : width;
    }
    for (size_t c = 0; c < n_cols; c++) {
        struct cell cell = make_cell(json_object_get(obj, cols[c].key), cols[c].max_width);
        put_field(out, cols[c].header, width, false, false);
        fprintf(out, "  %s\n", cell.text != NULL ? cell.text : "(out of memory)");
        txo_free(cell.text);
    }
}

int listing_json(FILE *out, const char *cmd, const json_t *doc)
{
    if (doc == NULL) {
        fprintf(stderr, "txo %s: out of memory building the JSON document\n", cmd);
        return -1;
    }
    if (json_dumpf(doc, out, JSON_COMPACT | JSON_PRESERVE_ORDER) != 0 || fputc('\n', out) == EOF) {
        fprintf(stderr, "txo %s: cannot write the JSON document\n", cmd);
        return -1;
    }
    return 0;
}

int listing_print(const char *cmd, json_t *doc, bool json, listing_tables_fn *tables, void *arg)
{
    int rc = 0;
    if (json || doc == NULL)
        rc = listing_json(stdout, cmd, doc);
    else
        tables(doc, arg);
    json_decref(doc);
    return rc;
}

void listing_rows(const json_t *doc, void *arg)
{
    const struct listing_columns *c = arg;
    listing_table(stdout, c->cols, c->n, doc);
}

void listing_add_json_setting(struct settings_table *t, bool *json, const char *help)
{
    const struct setting s[] = {
        {.name = "json",
         .env = "TXO_JSON",
         .type = SETTING_BOOL,
         .def = "false",
         .help = help,
         .target = json},
    };
    settings_add(t, s, TXO_ARRAY_LEN(s));
}

json_t *listing_str(const char *s)
{
    if (s == NULL)
        return json_null();
    json_t *v = json_string(s);
    if (v != NULL)
        return v;
    /* Not UTF-8 (a message quoting bytes someone sent): every byte past ASCII as '?'. */
    char *ascii = txo_strdup(s);
    if (ascii == NULL)
        return NULL;
    for (char *p = ascii; *p != '\0'; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    v = json_string(ascii);
    txo_free(ascii);
    return v;
}
