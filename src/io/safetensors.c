/*
 * safetensors.c — the safetensors format (https://github.com/huggingface/safetensors):
 *   8 bytes   N, the header length, little-endian u64
 *   N bytes   a JSON object {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
 *             ..., "__metadata__": {"key": "value"}} (padded with spaces)
 *   the rest  raw little-endian data; offsets count from the end of the header
 * Save writes it; load validates every field before creating a tensor. JSON through cJSON.
 * The header must be UTF-8 (it is JSON): every byte of it is checked, and so are the \u
 * escapes of its strings (no lone surrogates, no \u0000), before cJSON sees it.
 * A file is loaded from a read-only private mapping (no second copy of it in memory; the pages
 * of each tensor are dropped once the tensor is made), or read whole when it cannot be mapped
 * (a pipe). The map keeps its tensors in header order plus an index sorted by name, so that a
 * lookup is a binary search.
 *
 * Quantized tensors (ember.h's em_quant_kind) have no safetensors dtype: a quantized tensor is
 * stored as its bytes in the scheme's contiguous layout, dtype "U8", shape [bytes], and its
 * scheme and shape in the metadata under "ember.quant.<name>" (a JSON object in a string, as
 * the format's metadata holds strings only; io.h and docs/quantization.md). Loading checks that
 * object as hostile input before the tensor is made.
 *
 * The same reader and writer work on raw bytes for the formats built on safetensors (a captured
 * graph's file): safetensors_internal.h.
 *
 * Built on the public API only (ember.h, io.h) plus em_backend_set_error for messages.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ember/backend.h"
#include "ember/ember.h"
#include "ember/io.h"
#include "safetensors_internal.h"
#include "utf8.h"

#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000) /* the reference implementation's limit */
#define ST_MAX_EXACT 9007199254740992.0            /* 2^53: integers JSON numbers hold exactly */

struct em_tensor_map {
    size_t n;
    char **names;        /* header order */
    em_tensor **tensors; /* header order */
    size_t *by_name;     /* indices into names, sorted by strcmp of the names */
};

static const struct {
    const char *name;
    em_dtype dt;
} st_dtypes[] = {
    {"F32", EM_F32}, {"F64", EM_F64}, {"F16", EM_F16}, {"BF16", EM_BF16}, {"I64", EM_I64},
    {"I32", EM_I32}, {"I16", EM_I16}, {"I8", EM_I8},   {"U8", EM_U8},     {"BOOL", EM_BOOL},
};
#define ST_NDTYPES (sizeof st_dtypes / sizeof st_dtypes[0])

/* Other dtypes of the format, known but not representable in ember. */
static const char *const st_unsupported[] = {"U16", "U32", "U64", "F8_E4M3", "F8_E5M2",
                                             "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"};

static const char *st_dtype_name(em_dtype dt) {
    for (size_t i = 0; i < ST_NDTYPES; i++)
        if (st_dtypes[i].dt == dt) return st_dtypes[i].name;
    return NULL;
}

static bool host_is_little_endian(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Reverses the bytes of each `size`-byte element (for big-endian hosts). */
static void swap_elements(uint8_t *p, size_t count, size_t size) {
    if (size <= 1) return;
    for (size_t i = 0; i < count; i++, p += size)
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

void em_tensor_map_release(em_tensor_map *m) {
    if (m == NULL) return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->names[i]);
        em_tensor_release(m->tensors[i]);
    }
    free(m->names);
    free(m->tensors);
    free(m->by_name);
    free(m);
}

size_t em_tensor_map_size(const em_tensor_map *m) { return m ? m->n : 0; }

const char *em_tensor_map_name(const em_tensor_map *m, size_t i) {
    return (m != NULL && i < m->n) ? m->names[i] : NULL;
}

em_status em_tensor_map_get(const em_tensor_map *m, const char *name, em_tensor **out) {
    if (m == NULL || name == NULL || out == NULL)
        return em_backend_set_error(EM_ERR_ARG, "em_tensor_map_get: %s is NULL",
                                    m == NULL ? "m" : name == NULL ? "name" : "out");
    size_t lo = 0, hi = m->n; /* binary search of by_name */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2, i = m->by_name[mid];
        int c = strcmp(name, m->names[i]);
        if (c == 0) {
            /* in a tensor scope, a handle of the caller's own */
            return em_tensor_alias(m->tensors[i], out);
        }
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return em_backend_set_error(EM_ERR_ARG, "em_tensor_map_get: no tensor named \"%s\"", name);
}

/* ---- loading -------------------------------------------------------------------------------- */

/* One tensor entry of the header, validated. */
typedef struct st_entry {
    const char *name; /* points into the cJSON tree */
    em_dtype dt;
    int rank;
    int64_t shape[EM_MAX_RANK];
    uint64_t begin, end;
} st_entry;

/* A non-negative integer held exactly by a JSON number; false otherwise. */
static bool json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || d > ST_MAX_EXACT || d != floor(d)) return false;
    *out = (uint64_t)d;
    return true;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

static int cmp_begin(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* The message prefix: "em_safetensors_load: path" or "em_safetensors_load_buffer". */
typedef struct st_ctx {
    const char *fn;
    const char *path; /* NULL for a buffer */
    bool mapped;      /* the image is a private read-only file mapping: drop pages once used */
} st_ctx;

#define ST_FAIL(ctx, fmt, ...)                                                                  \
    em_backend_set_error(EM_ERR_IO, "%s%s%s: " fmt, (ctx)->fn, (ctx)->path ? ": " : "",       \
                         (ctx)->path ? (ctx)->path : "", __VA_ARGS__)

/* ---- the header's text: UTF-8 and \u escapes ------------------------------------------------- */

/* The string literal whose opening quote is t[start], for a message: up to 48 bytes of its
 * text as written, bytes outside printable ASCII as \xHH, quotes included. */
static void show_literal(const uint8_t *t, size_t len, size_t start, char *buf, size_t cap) {
    size_t k = 0;
    bool closed = false, escaped = false;
    for (size_t i = start; i < len && i - start < 48 && k + 8 < cap; i++) {
        uint8_t c = t[i];
        if (c >= 0x20 && c < 0x7f) buf[k++] = (char)c;
        else k += (size_t)snprintf(buf + k, cap - k, "\\x%02x", c);
        if (c == '"' && i > start && !escaped) {
            closed = true;
            break;
        }
        escaped = !escaped && c == '\\';
    }
    if (!closed && k + 4 < cap) memcpy(buf + k, "...", 3), k += 3;
    buf[k] = '\0';
}

static bool hex4(const uint8_t *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        unsigned d = (c >= '0' && c <= '9') ? (unsigned)(c - '0')
                     : (c >= 'a' && c <= 'f') ? (unsigned)(c - 'a' + 10)
                     : (c >= 'A' && c <= 'F') ? (unsigned)(c - 'A' + 10)
                     : 16u;
        if (d == 16u) return false;
        v = v * 16u + d;
    }
    *out = v;
    return true;
}

/* Refuses a header that is not UTF-8, or whose strings escape a lone surrogate (which has no
 * UTF-8 form) or U+0000 (which a C string cannot hold). Everything else about the JSON is left
 * to cJSON; the little structure tracked here only says, in the message, whether the bad string
 * is a tensor name, a key or value of __metadata__, or another string. */
static em_status check_header_text(const st_ctx *ctx, const uint8_t *t, size_t len) {
    enum { MAXD = 64 };
    bool obj[MAXD + 1] = {false}, key_next[MAXD + 1] = {false};
    int depth = 0;
    bool in_meta = false; /* the current key of the root object is "__metadata__" */
    char why[128], lit[256];
    size_t i = 0;
    while (i < len) {
        uint8_t c = t[i];
        if (c != '"') {
            if (c >= 0x80) {
                size_t n = emi_utf8_seq(t + i, len - i, why, sizeof why);
                if (n == 0)
                    return ST_FAIL(ctx, "header is not valid UTF-8: %s at byte %zu of the header",
                                   why, i);
                i += n;
                continue;
            }
            bool tracked = depth >= 1 && depth <= MAXD;
            if (c == '{' || c == '[') {
                depth++;
                if (depth <= MAXD) obj[depth] = c == '{', key_next[depth] = c == '{';
            } else if (c == '}' || c == ']') {
                if (depth > 0) depth--;
            } else if (c == ':' && tracked) {
                key_next[depth] = false;
            } else if (c == ',' && tracked) {
                key_next[depth] = obj[depth];
            }
            i++;
            continue;
        }
        /* a string literal */
        size_t start = i++;
        bool is_key = depth >= 1 && depth <= MAXD && obj[depth] && key_next[depth];
        const char *role = "string";
        if (depth == 1 && is_key) role = "tensor name";
        else if (depth == 2 && in_meta && obj[2])
            role = is_key ? "__metadata__ key" : "__metadata__ value";
        enum { FINE, BAD_UTF8, NUL_ESCAPE, LONE_SURROGATE } problem = FINE;
        size_t at = 0;
        while (i < len && t[i] != '"' && problem == FINE) {
            if (t[i] == '\\') {
                unsigned u = 0, lo = 0;
                if (i + 6 <= len && t[i + 1] == 'u' && hex4(t + i + 2, &u)) {
                    if (u == 0) {
                        problem = NUL_ESCAPE, at = i;
                    } else if (u >= 0xD800 && u <= 0xDBFF) {
                        if (i + 12 <= len && t[i + 6] == '\\' && t[i + 7] == 'u' &&
                            hex4(t + i + 8, &lo) && lo >= 0xDC00 && lo <= 0xDFFF)
                            i += 12; /* a surrogate pair: one character */
                        else problem = LONE_SURROGATE, at = i;
                    } else if (u >= 0xDC00 && u <= 0xDFFF) {
                        problem = LONE_SURROGATE, at = i;
                    } else {
                        i += 6;
                    }
                } else {
                    i += (i + 1 < len && t[i + 1] < 0x80) ? 2 : 1; /* cJSON judges the rest */
                }
            } else if (t[i] < 0x80) {
                i++;
            } else {
                size_t n = emi_utf8_seq(t + i, len - i, why, sizeof why);
                if (n == 0) problem = BAD_UTF8, at = i;
                i += n;
            }
        }
        if (problem != FINE) {
            show_literal(t, len, start, lit, sizeof lit);
            if (problem == BAD_UTF8)
                return ST_FAIL(ctx, "header is not valid UTF-8: %s at byte %zu of the header, "
                               "in the %s %s", why, at, role, lit);
            if (problem == NUL_ESCAPE)
                return ST_FAIL(ctx, "header has \\u0000 (a C string cannot hold U+0000) at "
                               "byte %zu of the header, in the %s %s", at, role, lit);
            return ST_FAIL(ctx, "header has a lone surrogate %.6s at byte %zu of the header (it "
                           "is no character, so has no UTF-8 form), in the %s %s",
                           (const char *)t + at, at, role, lit);
        }
        if (depth == 1 && is_key)
            in_meta = i - start - 1 == 12 && memcmp(t + start + 1, "__metadata__", 12) == 0;
        if (i < len) i++; /* the closing quote */
    }
    return EM_OK;
}

/* ---- the entries ---------------------------------------------------------------------------- */

/* Validates one header entry into *e. */
static em_status parse_entry(const st_ctx *ctx, const cJSON *item, st_entry *e) {
    const char *name = item->string;
    if (!cJSON_IsObject(item)) return ST_FAIL(ctx, "tensor \"%s\": not a JSON object", name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dtype) || dtype->valuestring == NULL)
        return ST_FAIL(ctx, "tensor \"%s\": missing string \"dtype\"", name);
    if (!cJSON_IsArray(shape))
        return ST_FAIL(ctx, "tensor \"%s\": missing array \"shape\"", name);
    if (!cJSON_IsArray(offs))
        return ST_FAIL(ctx, "tensor \"%s\": missing array \"data_offsets\"", name);
    e->name = name;
    bool found = false;
    for (size_t i = 0; i < ST_NDTYPES; i++)
        if (strcmp(dtype->valuestring, st_dtypes[i].name) == 0) {
            e->dt = st_dtypes[i].dt;
            found = true;
        }
    if (!found) {
        for (size_t i = 0; i < sizeof st_unsupported / sizeof st_unsupported[0]; i++)
            if (strcmp(dtype->valuestring, st_unsupported[i]) == 0)
                return ST_FAIL(ctx, "tensor \"%s\": dtype \"%s\" is not supported by ember",
                               name, dtype->valuestring);
        return ST_FAIL(ctx, "tensor \"%s\": unknown dtype \"%.32s\"", name, dtype->valuestring);
    }
    int rank = cJSON_GetArraySize(shape);
    if (rank > EM_MAX_RANK)
        return ST_FAIL(ctx, "tensor \"%s\": rank %d > %d", name, rank, EM_MAX_RANK);
    e->rank = rank;
    uint64_t numel = 1;
    bool overflow = false;
    int d = 0;
    for (const cJSON *v = shape->child; v != NULL; v = v->next, d++) {
        uint64_t dim;
        if (!json_uint(v, &dim))
            return ST_FAIL(ctx, "tensor \"%s\": shape[%d] is not a non-negative integer", name,
                           d);
        e->shape[d] = (int64_t)dim;
        if (dim != 0 && numel > UINT64_MAX / dim) overflow = true;
        else numel *= dim;
    }
    size_t esize = em_dtype_size(e->dt);
    if (!overflow && numel > UINT64_MAX / esize) overflow = true;
    /* A zero dim makes the tensor empty whatever the others are. */
    for (int i = 0; i < rank; i++)
        if (e->shape[i] == 0) overflow = false, numel = 0;
    if (overflow || numel > (uint64_t)INT64_MAX)
        return ST_FAIL(ctx, "tensor \"%s\": element count overflows", name);
    if (cJSON_GetArraySize(offs) != 2 || !json_uint(offs->child, &e->begin) ||
        !json_uint(offs->child->next, &e->end))
        return ST_FAIL(ctx, "tensor \"%s\": data_offsets is not two non-negative integers",
                       name);
    if (e->end < e->begin)
        return ST_FAIL(ctx, "tensor \"%s\": data_offsets [%llu, %llu] are reversed", name,
                       (unsigned long long)e->begin, (unsigned long long)e->end);
    uint64_t want = numel * esize;
    if (e->end - e->begin != want)
        return ST_FAIL(ctx,
                       "tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes, but shape x "
                       "dtype size is %llu",
                       name, (unsigned long long)e->begin, (unsigned long long)e->end,
                       (unsigned long long)(e->end - e->begin), (unsigned long long)want);
    return EM_OK;
}

/* Gives back the whole pages of a private read-only file mapping that [p, p + n) covers, once a
 * tensor has been made from them, so that a load holds one copy of the data at a time rather
 * than the file and the tensors. The pages are clean, so reading them again (a tensor that
 * shares a page) faults them back in from the file. */
static void drop_pages(const uint8_t *p, size_t n) {
#ifdef MADV_DONTNEED
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    uintptr_t lo = ((uintptr_t)p + (uintptr_t)pg - 1) / (uintptr_t)pg * (uintptr_t)pg;
    uintptr_t hi = ((uintptr_t)p + n) / (uintptr_t)pg * (uintptr_t)pg;
    if (hi > lo) (void)madvise((void *)lo, (size_t)(hi - lo), MADV_DONTNEED);
#else
    (void)p, (void)n;
#endif
}

/* A validated header: its entries in header order, and the data section they point into. */
typedef struct st_header {
    char *text;           /* the header's NUL-terminated copy, which root was parsed from */
    cJSON *root;
    const cJSON *meta;    /* root's "__metadata__" object (string values only), or NULL */
    st_entry *entries;    /* header order; their names point into root */
    size_t count;
    size_t *by_name;      /* indices into entries, sorted by strcmp of the names */
    const uint8_t *data;  /* the data section: data_offsets count from here */
} st_header;

static void st_header_free(st_header *h) {
    free(h->entries);
    free(h->by_name);
    cJSON_Delete(h->root);
    free(h->text);
    memset(h, 0, sizeof *h);
}

/* Parses and checks the image buf[0, len): header length, UTF-8, JSON, every entry (dtype,
 * shape, offsets), __metadata__ (an object of strings), duplicate names, offsets inside the
 * data and not overlapping. Everything but making tensors. On failure *h holds nothing. */
static em_status st_parse_header(const st_ctx *ctx, const uint8_t *buf, size_t len,
                                 st_header *h) {
    memset(h, 0, sizeof *h);
    if (len < 8)
        return ST_FAIL(ctx, "truncated: %zu bytes, too short for the 8-byte header length",
                       len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > ST_MAX_HEADER)
        return ST_FAIL(ctx, "header length %llu exceeds the limit of %llu bytes",
                       (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
    if (hlen > len - 8)
        return ST_FAIL(ctx, "truncated: header length %llu, but only %zu bytes follow",
                       (unsigned long long)hlen, len - 8);
    if (hlen < 2) return ST_FAIL(ctx, "header of %llu bytes is not a JSON object",
                                 (unsigned long long)hlen);
    const uint8_t *data = buf + 8 + hlen;
    uint64_t data_len = len - 8 - hlen;
    em_status hs = check_header_text(ctx, buf + 8, (size_t)hlen);
    if (hs != EM_OK) return hs;

    /* A NUL-terminated copy, so that the parser can never read past the header. */
    char *text = malloc((size_t)hlen + 1);
    if (text == NULL) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", ctx->fn);
    memcpy(text, buf + 8, (size_t)hlen);
    text[hlen] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)hlen, &end, false);
    em_status s = EM_OK;
    st_entry *entries = NULL, **order = NULL;
    size_t *by_name = NULL, count = 0;
    const cJSON *meta = NULL;
    if (root == NULL) {
        size_t at = (end != NULL && end >= text) ? (size_t)(end - text) : 0;
        s = ST_FAIL(ctx, "header is not valid JSON (error near byte %zu)", at);
        goto done;
    }
    for (const char *p = end; p != NULL && p < text + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            s = ST_FAIL(ctx, "header has data after its JSON object (byte %zu)",
                        (size_t)(p - text));
            goto done;
        }
    if (!cJSON_IsObject(root)) {
        s = ST_FAIL(ctx, "header is not a JSON object%s", "");
        goto done;
    }
    for (const cJSON *it = root->child; it != NULL; it = it->next) {
        if (it->string == NULL) {
            s = ST_FAIL(ctx, "header entry without a name%s", "");
            goto done;
        }
        if (strcmp(it->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(it)) {
                s = ST_FAIL(ctx, "__metadata__ is not an object%s", "");
                goto done;
            }
            for (const cJSON *kv = it->child; kv != NULL; kv = kv->next)
                if (!cJSON_IsString(kv)) {
                    s = ST_FAIL(ctx, "__metadata__ \"%s\" is not a string",
                                kv->string ? kv->string : "?");
                    goto done;
                }
            continue;
        }
        count++;
    }
    entries = calloc(count ? count : 1, sizeof *entries);
    order = calloc(count ? count : 1, sizeof *order);
    if (entries == NULL || order == NULL) {
        s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", ctx->fn);
        goto done;
    }
    size_t k = 0, metas = 0;
    for (const cJSON *it = root->child; it != NULL; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (++metas > 1) {
                s = ST_FAIL(ctx, "duplicate name \"%s\"", "__metadata__");
                goto done;
            }
            meta = it;
            continue;
        }
        if ((s = parse_entry(ctx, it, &entries[k])) != EM_OK) goto done;
        order[k] = &entries[k];
        k++;
    }
    /* duplicates: neighbours once sorted by name; that order is the index by name */
    qsort(order, count, sizeof *order, cmp_name);
    for (size_t i = 1; i < count; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
            s = ST_FAIL(ctx, "duplicate name \"%s\"", order[i]->name);
            goto done;
        }
    by_name = malloc((count ? count : 1) * sizeof *by_name);
    if (by_name == NULL) {
        s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", ctx->fn);
        goto done;
    }
    for (size_t i = 0; i < count; i++) by_name[i] = (size_t)(order[i] - entries);
    /* range and overlap: sorted by begin, each starts at or after the previous end */
    qsort(order, count, sizeof *order, cmp_begin);
    uint64_t max_end = 0;
    const char *max_name = "";
    for (size_t i = 0; i < count; i++) {
        if (order[i]->end > data_len) {
            s = ST_FAIL(ctx, "tensor \"%s\": data_offsets [%llu, %llu] exceed the %llu data "
                        "bytes",
                        order[i]->name, (unsigned long long)order[i]->begin,
                        (unsigned long long)order[i]->end, (unsigned long long)data_len);
            goto done;
        }
        if (order[i]->begin == order[i]->end) continue; /* empty: overlaps nothing */
        if (order[i]->begin < max_end) {
            s = ST_FAIL(ctx, "tensors \"%s\" and \"%s\" overlap", max_name, order[i]->name);
            goto done;
        }
        max_end = order[i]->end;
        max_name = order[i]->name;
    }
done:
    free(order);
    if (s != EM_OK) {
        free(entries);
        free(by_name);
        cJSON_Delete(root);
        free(text);
        return s;
    }
    *h = (st_header){text, root, meta, entries, count, by_name, data};
    return EM_OK;
}

/* ---- quantized tensors: the "ember.quant.<name>" metadata ------------------------------------ */

#define ST_QUANT_PREFIX "ember.quant."
#define ST_QUANT_PREFIX_LEN (sizeof ST_QUANT_PREFIX - 1)

static const struct {
    const char *name;
    em_dtype storage;
    em_quant_kind kind;
} st_schemes[] = {
    {"q8_affine", EM_Q8, EM_QK_AFFINE}, {"q4_affine", EM_Q4, EM_QK_AFFINE},
    {"q8_symmetric", EM_Q8, EM_QK_SYMMETRIC}, {"q8_block", EM_Q8, EM_QK_BLOCK},
    {"q4_block", EM_Q4, EM_QK_BLOCK}, {"q4_block_min", EM_Q4, EM_QK_BLOCK_MIN},
};
#define ST_NSCHEMES (sizeof st_schemes / sizeof st_schemes[0])

static bool st_block_kind(em_quant_kind k) { return k == EM_QK_BLOCK || k == EM_QK_BLOCK_MIN; }

static const char *st_scheme_name(const em_quant_scheme *sc) {
    for (size_t i = 0; i < ST_NSCHEMES; i++)
        if (st_schemes[i].storage == sc->storage && st_schemes[i].kind == sc->kind)
            return st_schemes[i].name;
    return NULL;
}

/* The metadata value that describes a quantized tensor of scheme sc and shape [rank]:
 * {"scheme": "q4_block_min", "scale_dtype": "f16", "shape": [256, 784]} for a block kind,
 * {"scheme": "q8_affine", "scale": 0.0123, "zero_point": -3, "shape": [...]} for a per-tensor
 * one ("zero_point" for affine only); "transposed": true for a 2-d block tensor whose blocks
 * run along its first dim (the bytes are then its transpose's, whose blocks run along the
 * last). A new string (cJSON_free), or NULL out of memory. */
static char *st_quant_describe(const em_quant_scheme *sc, const int64_t *shape, int rank,
                               bool transposed) {
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL && cJSON_AddStringToObject(o, "scheme", st_scheme_name(sc)) != NULL;
    if (ok && transposed) ok = cJSON_AddTrueToObject(o, "transposed") != NULL;
    if (ok && st_block_kind(sc->kind))
        ok = cJSON_AddStringToObject(o, "scale_dtype", sc->scale_dtype == EM_F16 ? "f16"
                                                                                 : "f32") != NULL;
    if (ok && !st_block_kind(sc->kind)) {
        ok = cJSON_AddNumberToObject(o, "scale", (double)sc->scale) != NULL;
        if (ok && sc->kind == EM_QK_AFFINE)
            ok = cJSON_AddNumberToObject(o, "zero_point", (double)sc->zero_point) != NULL;
    }
    cJSON *sh = ok ? cJSON_AddArrayToObject(o, "shape") : NULL;
    ok = ok && sh != NULL;
    for (int d = 0; ok && d < rank; d++) {
        cJSON *v = cJSON_CreateNumber((double)shape[d]);
        ok = v != NULL;
        if (ok) cJSON_AddItemToArray(sh, v);
    }
    char *text = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return text;
}

/* A quantized tensor described by the metadata, validated: its scheme and shape. */
typedef struct st_quant {
    bool present;
    bool transposed; /* the bytes are the layout of [shape[1], shape[0]], the tensor its view */
    em_quant_scheme scheme;
    int rank;
    int64_t shape[EM_MAX_RANK];
} st_quant;

/* Parses the metadata value v of tensor e (key "ember.quant.<e->name>") into *q; every field is
 * checked (the file is untrusted): a JSON object with exactly the keys its scheme uses, a known
 * scheme, the scale dtype of a block kind, a finite positive scale and a zero point in the
 * storage's range for a per-tensor kind, a shape of rank <= 8 whose layout is the entry's byte
 * count, the entry itself "U8" of rank 1. */
static em_status st_quant_parse(const st_ctx *ctx, const st_entry *e, const char *v,
                                st_quant *q) {
    const char *name = e->name;
    memset(q, 0, sizeof *q);
    cJSON *o = cJSON_ParseWithOpts(v, NULL, true); /* all of v, NUL-terminated */
    em_status s = EM_OK;
    const char *why = NULL;
    char buf[160];
    if (o == NULL || !cJSON_IsObject(o)) {
        why = "is not a JSON object";
        goto done;
    }
    const cJSON *scheme = cJSON_GetObjectItemCaseSensitive(o, "scheme");
    const cJSON *sdt = cJSON_GetObjectItemCaseSensitive(o, "scale_dtype");
    const cJSON *scale = cJSON_GetObjectItemCaseSensitive(o, "scale");
    const cJSON *zp = cJSON_GetObjectItemCaseSensitive(o, "zero_point");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(o, "transposed");
    if (!cJSON_IsString(scheme) || scheme->valuestring == NULL) {
        why = "has no string \"scheme\"";
        goto done;
    }
    bool known = false;
    for (size_t i = 0; i < ST_NSCHEMES; i++)
        if (strcmp(scheme->valuestring, st_schemes[i].name) == 0) {
            q->scheme.storage = st_schemes[i].storage;
            q->scheme.kind = st_schemes[i].kind;
            known = true;
        }
    if (!known) {
        snprintf(buf, sizeof buf, "has an unknown scheme \"%.32s\" (q8_affine, q4_affine, "
                 "q8_symmetric, q8_block, q4_block, q4_block_min)", scheme->valuestring);
        why = buf;
        goto done;
    }
    const bool block = st_block_kind(q->scheme.kind), affine = q->scheme.kind == EM_QK_AFFINE;
    size_t want_keys = 2 + (block ? 1 : 1 + (affine ? 1 : 0)) + (tr != NULL ? 1 : 0);
    if ((size_t)cJSON_GetArraySize(o) != want_keys ||
        (block && (scale != NULL || zp != NULL || sdt == NULL)) ||
        (!block && (sdt != NULL || scale == NULL || (affine != (zp != NULL)))) ||
        shape == NULL) {
        snprintf(buf, sizeof buf, "does not have the keys of scheme %s (%s)",
                 scheme->valuestring,
                 block ? "scheme, scale_dtype, shape, optional transposed"
                 : affine ? "scheme, scale, zero_point, shape" : "scheme, scale, shape");
        why = buf;
        goto done;
    }
    if (tr != NULL && (!block || !cJSON_IsBool(tr))) {
        why = "has a \"transposed\" that is not a boolean of a block scheme";
        goto done;
    }
    q->transposed = tr != NULL && cJSON_IsTrue(tr);
    if (block) {
        if (!cJSON_IsString(sdt) || sdt->valuestring == NULL ||
            (strcmp(sdt->valuestring, "f32") != 0 && strcmp(sdt->valuestring, "f16") != 0)) {
            why = "has a \"scale_dtype\" that is not \"f32\" or \"f16\"";
            goto done;
        }
        q->scheme.scale_dtype = strcmp(sdt->valuestring, "f16") == 0 ? EM_F16 : EM_F32;
    } else {
        double d = cJSON_IsNumber(scale) ? scale->valuedouble : NAN;
        float f = (float)d;
        if (!(isfinite(d) && d > 0 && isfinite(f) && f > 0)) {
            why = "has a \"scale\" that is not a finite number > 0 (as an f32)";
            goto done;
        }
        q->scheme.scale = f;
        if (affine) {
            double lo = q->scheme.storage == EM_Q8 ? -128 : -8,
                   hi = q->scheme.storage == EM_Q8 ? 127 : 7;
            double z = cJSON_IsNumber(zp) ? zp->valuedouble : NAN;
            if (!(z >= lo && z <= hi && z == floor(z))) {
                snprintf(buf, sizeof buf, "has a \"zero_point\" that is not an integer in "
                         "[%g, %g]", lo, hi);
                why = buf;
                goto done;
            }
            q->scheme.zero_point = (int32_t)z;
        }
    }
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > EM_MAX_RANK) {
        why = "has a \"shape\" that is not an array of at most 8 dims";
        goto done;
    }
    for (const cJSON *d = shape->child; d != NULL; d = d->next) {
        uint64_t dim;
        if (!json_uint(d, &dim)) {
            why = "has a \"shape\" dim that is not a non-negative integer";
            goto done;
        }
        q->shape[q->rank++] = (int64_t)dim;
    }
    if (e->dt != EM_U8 || e->rank != 1) {
        why = "describes a tensor whose entry is not \"U8\" of rank 1 (the bytes of its layout)";
        goto done;
    }
    if (q->transposed && q->rank != 2) {
        why = "is \"transposed\" but its shape is not 2-d";
        goto done;
    }
    /* the bytes' own shape: the transpose's for a transposed one */
    int64_t bshape[EM_MAX_RANK];
    memcpy(bshape, q->shape, sizeof bshape);
    if (q->transposed) bshape[0] = q->shape[1], bshape[1] = q->shape[0];
    size_t nbytes = 0;
    if (em_quant_nbytes(&q->scheme, bshape, q->rank, &nbytes) != EM_OK) {
        snprintf(buf, sizeof buf, "has a shape that scheme %s cannot hold: %.100s",
                 scheme->valuestring, em_last_error());
        why = buf;
        goto done;
    }
    if ((uint64_t)nbytes != e->end - e->begin) {
        snprintf(buf, sizeof buf, "needs %zu bytes for its shape, the entry holds %llu", nbytes,
                 (unsigned long long)(e->end - e->begin));
        why = buf;
        goto done;
    }
    q->present = true;
done:
    if (why != NULL)
        s = ST_FAIL(ctx, "tensor \"%s\": __metadata__ \"" ST_QUANT_PREFIX "%s\" %s", name, name,
                    why);
    cJSON_Delete(o);
    return s;
}

/* Reads every "ember.quant.<name>" key of h's metadata into quant[i] for the entry i it names
 * (quant: h->count zeroed entries). A key that names no tensor, or a tensor twice, is refused. */
static em_status st_quant_read(const st_ctx *ctx, const st_header *h, st_quant *quant) {
    if (h->meta == NULL) return EM_OK;
    for (const cJSON *kv = h->meta->child; kv != NULL; kv = kv->next) {
        const char *key = kv->string;
        if (key == NULL || strncmp(key, ST_QUANT_PREFIX, ST_QUANT_PREFIX_LEN) != 0) continue;
        const char *name = key + ST_QUANT_PREFIX_LEN;
        size_t lo = 0, hi = h->count, at = SIZE_MAX; /* binary search of by_name */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2, i = h->by_name[mid];
            int c = strcmp(name, h->entries[i].name);
            if (c == 0) {
                at = i;
                break;
            }
            if (c < 0) hi = mid;
            else lo = mid + 1;
        }
        if (at == SIZE_MAX)
            return ST_FAIL(ctx, "__metadata__ \"%.200s\" describes a quantized tensor that the "
                           "file does not have", key);
        if (quant[at].present)
            return ST_FAIL(ctx, "tensor \"%s\": __metadata__ \"%.200s\" given twice", name, key);
        em_status s = st_quant_parse(ctx, &h->entries[at], kv->valuestring, &quant[at]);
        if (s != EM_OK) return s;
    }
    return EM_OK;
}

/* The per-tensor kinds hold one integer per byte: each must be in the storage's range (q8
 * symmetric [-127, 127], q4 [-8, 7]; q8 affine takes every byte). */
static em_status st_quant_check_values(const st_ctx *ctx, const char *name, const st_quant *q,
                                       const uint8_t *p, size_t n) {
    int lo = -128, hi = 127;
    if (q->scheme.kind == EM_QK_SYMMETRIC) lo = -127;
    else if (q->scheme.kind == EM_QK_AFFINE && q->scheme.storage == EM_Q4) lo = -8, hi = 7;
    else return EM_OK;
    for (size_t i = 0; i < n; i++) {
        int v = (int)(int8_t)p[i];
        if (v < lo || v > hi)
            return ST_FAIL(ctx, "tensor \"%s\": quantized value %d at element %zu is outside "
                           "[%d, %d]", name, v, i, lo, hi);
    }
    return EM_OK;
}

static em_status st_parse(const st_ctx *ctx, const uint8_t *buf, size_t len, em_device dev,
                          em_tensor_map **out) {
    st_header h;
    em_status s = st_parse_header(ctx, buf, len, &h);
    if (s != EM_OK) return s;
    const size_t count = h.count;
    uint8_t *tmp = NULL;
    st_quant *quant = NULL;
    em_tensor_map *m = calloc(1, sizeof *m);
    if (m == NULL) {
        s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", ctx->fn);
        goto done;
    }
    quant = calloc(count ? count : 1, sizeof *quant);
    if (quant == NULL) {
        s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", ctx->fn);
        goto done;
    }
    if ((s = st_quant_read(ctx, &h, quant)) != EM_OK) goto done;
    m->by_name = h.by_name; /* the map's index */
    h.by_name = NULL;

    /* Everything checks out: create the tensors, in header order. */
    m->names = calloc(count ? count : 1, sizeof *m->names);
    m->tensors = calloc(count ? count : 1, sizeof *m->tensors);
    if (m->names == NULL || m->tensors == NULL) {
        s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", ctx->fn);
        goto done;
    }
    bool swap = !host_is_little_endian();
    for (size_t i = 0; i < count; i++) {
        const st_entry *e = &h.entries[i];
        size_t bytes = (size_t)(e->end - e->begin), esize = em_dtype_size(e->dt);
        const uint8_t *src = h.data + e->begin;
        const void *p = src;
        em_tensor *t = NULL;
        if (quant[i].present) {
            /* the layout's own bytes (little-endian scales): no swap, any alignment */
            const st_quant *q = &quant[i];
            s = st_quant_check_values(ctx, e->name, q, src, bytes);
            int64_t bshape[EM_MAX_RANK];
            memcpy(bshape, q->shape, sizeof bshape);
            if (q->transposed) bshape[0] = q->shape[1], bshape[1] = q->shape[0];
            if (s == EM_OK)
                s = em_tensor_from_quantized(bytes ? (const void *)src : (const void *)"", bytes,
                                             &q->scheme, q->rank ? bshape : NULL, q->rank, dev,
                                             &t);
            if (s == EM_OK && q->transposed) {
                em_tensor *v = NULL;
                s = em_transpose(t, 0, 1, &v);
                em_tensor_release(t);
                t = v;
            }
            if (s != EM_OK && s != EM_ERR_NOMEM && s != EM_ERR_DEVICE && s != EM_ERR_IO) {
                char why[256];
                snprintf(why, sizeof why, "%s", em_last_error());
                s = ST_FAIL(ctx, "tensor \"%s\": the quantized tensor cannot be made: %s",
                            e->name, why);
            }
            if (s != EM_OK) goto done;
            goto made;
        }
        if (bytes > 0 && (swap || e->dt == EM_BOOL || ((uintptr_t)src % esize) != 0)) {
            tmp = malloc(bytes);
            if (tmp == NULL) {
                s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory for tensor \"%s\"",
                                         ctx->fn, e->name);
                goto done;
            }
            memcpy(tmp, src, bytes);
            if (e->dt == EM_BOOL)
                for (size_t j = 0; j < bytes; j++) tmp[j] = tmp[j] != 0;
            if (swap) swap_elements(tmp, bytes / esize, esize);
            p = tmp;
        }
        static const uint8_t empty[8];
        if (bytes == 0) p = empty;
        s = em_tensor_from_data(p, e->dt, e->rank ? e->shape : NULL, e->rank, dev, &t);
        free(tmp);
        tmp = NULL;
        if (s != EM_OK) goto done;
    made:
        if (ctx->mapped && bytes > 0) drop_pages(src, bytes);
        em_scope_escape(t); /* the map's, not an open tensor scope's */
        m->tensors[m->n] = t;
        m->names[m->n] = strdup(e->name);
        m->n++;
        if (m->names[m->n - 1] == NULL) {
            s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", ctx->fn);
            goto done;
        }
    }
done:
    free(tmp);
    free(quant);
    st_header_free(&h);
    if (s != EM_OK) {
        em_tensor_map_release(m);
        return s;
    }
    *out = m;
    return EM_OK;
}

em_status em_safetensors_load_buffer(const void *data, size_t len, em_device dev,
                                     em_tensor_map **out) {
    if (out == NULL)
        return em_backend_set_error(EM_ERR_ARG, "em_safetensors_load_buffer: out is NULL");
    if (data == NULL && len > 0)
        return em_backend_set_error(EM_ERR_ARG, "em_safetensors_load_buffer: data is NULL");
    static const uint8_t nothing[1];
    st_ctx ctx = {"em_safetensors_load_buffer", NULL, false};
    return st_parse(&ctx, data ? data : nothing, len, dev, out);
}

/* Reads everything fd has left into a new buffer (for what cannot be mapped: a pipe). */
static em_status read_all(const char *fn, const char *path, int fd, size_t hint, uint8_t **buf,
                          size_t *len) {
    size_t cap = hint > 0 ? hint + 1 : (size_t)1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    if (b == NULL)
        return em_backend_set_error(EM_ERR_NOMEM, "%s: %s: out of memory for %zu bytes", fn,
                                    path, cap);
    for (;;) {
        if (n == cap) {
            uint8_t *nb = cap <= SIZE_MAX / 2 ? realloc(b, cap * 2) : NULL;
            if (nb == NULL) {
                free(b);
                return em_backend_set_error(EM_ERR_NOMEM, "%s: %s: out of memory for more than "
                                            "%zu bytes", fn, path, cap);
            }
            b = nb, cap *= 2;
        }
        ssize_t got = read(fd, b + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            free(b);
            return em_backend_set_error(EM_ERR_IO, "%s: %s: read error (%s)", fn, path,
                                        strerror(e));
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    *buf = b, *len = n;
    return EM_OK;
}

/* A file's bytes: a read-only private mapping of a regular file, or the whole of what cannot
 * be mapped (a pipe, an empty file) read into memory. */
typedef struct st_image {
    const uint8_t *p;
    size_t len;
    bool mapped; /* p is a mapping of len bytes (else p is owned memory, or NULL when empty) */
} st_image;

static em_status st_image_open(const char *fn, const char *path, st_image *img) {
    memset(img, 0, sizeof *img);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return em_backend_set_error(EM_ERR_IO, "%s: %s: cannot open (%s)", fn, path,
                                    strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return em_backend_set_error(EM_ERR_IO, "%s: %s: cannot stat (%s)", fn, path,
                                    strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return em_backend_set_error(EM_ERR_IO, "%s: %s: is a directory", fn, path);
    }
    /* A regular file is mapped, not copied (an empty one cannot be mapped: it is read). */
    if (S_ISREG(st.st_mode) && st.st_size > 0 && (uintmax_t)st.st_size <= SIZE_MAX) {
        size_t size = (size_t)st.st_size;
        void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map != MAP_FAILED) {
            close(fd);
            *img = (st_image){map, size, true};
            return EM_OK;
        }
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    size_t hint = S_ISREG(st.st_mode) && st.st_size > 0 && (uintmax_t)st.st_size < SIZE_MAX
                      ? (size_t)st.st_size
                      : 0;
    em_status s = read_all(fn, path, fd, hint, &buf, &len);
    close(fd);
    if (s != EM_OK) return s;
    *img = (st_image){buf, len, false};
    return EM_OK;
}

static void st_image_close(st_image *img) {
    if (img->mapped) munmap((void *)img->p, img->len);
    else free((void *)img->p);
    memset(img, 0, sizeof *img);
}

em_status em_safetensors_load(const char *path, em_device dev, em_tensor_map **out) {
    static const char *fn = "em_safetensors_load";
    if (path == NULL || out == NULL)
        return em_backend_set_error(EM_ERR_ARG, "%s: %s is NULL", fn,
                                    path == NULL ? "path" : "out");
    st_image img;
    em_status s = st_image_open(fn, path, &img);
    if (s != EM_OK) return s;
    st_ctx ctx = {fn, path, img.mapped};
    s = st_parse(&ctx, img.p, img.len, dev, out);
    st_image_close(&img);
    return s;
}

/* ---- raw access, for the formats built on safetensors (safetensors_internal.h) -------------- */

struct emi_st_file {
    st_image img;       /* the file's bytes (nothing for a buffer: the caller's) */
    st_header h;
    emi_st_tensor *all; /* header order */
};

static em_status st_open_raw(const st_ctx *ctx, const uint8_t *buf, size_t len,
                             emi_st_file **out) {
    emi_st_file *f = calloc(1, sizeof *f);
    if (f == NULL) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", ctx->fn);
    em_status s = st_parse_header(ctx, buf, len, &f->h);
    if (s != EM_OK) {
        free(f);
        return s;
    }
    f->all = calloc(f->h.count ? f->h.count : 1, sizeof *f->all);
    if (f->all == NULL) {
        emi_st_close(f);
        return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", ctx->fn);
    }
    for (size_t i = 0; i < f->h.count; i++) {
        const st_entry *e = &f->h.entries[i];
        emi_st_tensor *t = &f->all[i];
        t->name = e->name;
        t->dtype = e->dt;
        t->rank = e->rank;
        memcpy(t->shape, e->shape, sizeof t->shape);
        t->data = f->h.data + e->begin;
        t->bytes = e->end - e->begin;
    }
    *out = f;
    return EM_OK;
}

em_status emi_st_open_buffer(const char *fn, const char *what, const void *data, size_t len,
                             emi_st_file **out) {
    static const uint8_t nothing[1];
    st_ctx ctx = {fn, what, false};
    return st_open_raw(&ctx, data ? data : nothing, len, out);
}

em_status emi_st_open_file(const char *fn, const char *path, emi_st_file **out) {
    st_image img;
    em_status s = st_image_open(fn, path, &img);
    if (s != EM_OK) return s;
    st_ctx ctx = {fn, path, false};
    emi_st_file *f = NULL;
    s = st_open_raw(&ctx, img.p, img.len, &f);
    if (s != EM_OK) {
        st_image_close(&img);
        return s;
    }
    f->img = img;
    *out = f;
    return EM_OK;
}

size_t emi_st_count(const emi_st_file *f) { return f->h.count; }

const emi_st_tensor *emi_st_at(const emi_st_file *f, size_t i) {
    return i < f->h.count ? &f->all[i] : NULL;
}

const emi_st_tensor *emi_st_find(const emi_st_file *f, const char *name) {
    size_t lo = 0, hi = f->h.count; /* binary search of by_name */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2, i = f->h.by_name[mid];
        int c = strcmp(name, f->h.entries[i].name);
        if (c == 0) return &f->all[i];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

const char *emi_st_meta(const emi_st_file *f, const char *key) {
    const cJSON *v = f->h.meta ? cJSON_GetObjectItemCaseSensitive(f->h.meta, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

void emi_st_close(emi_st_file *f) {
    if (f == NULL) return;
    free(f->all);
    st_header_free(&f->h);
    if (f->img.p != NULL) st_image_close(&f->img);
    free(f);
}

/* ---- saving --------------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* One tensor of a file being written: its header entry. Its bytes come from an emit call. */
typedef struct st_put {
    const char *name;
    em_dtype dt;
    int rank;
    const int64_t *shape;
    uint64_t bytes;
} st_put;

/* Writes tensor i's bytes (little-endian) to f; false in *ok on a short write. Any status
 * other than EM_OK aborts the save (with the message it set). */
typedef em_status (*st_emit_fn)(void *arg, size_t i, FILE *f, bool *ok);

/* Writes the file: the header (metadata first, when nmeta > 0: meta holds nmeta key / value
 * pairs), padded with spaces to a multiple of 8 bytes, then each tensor's bytes through emit,
 * to "<path>.tmp", renamed over path when complete. With limit, a header longer than readers
 * accept (ST_MAX_HEADER) is EM_ERR_IO. */
static em_status st_write(const char *fn, const char *path, const st_put *t, size_t n,
                          const char *const *meta, size_t nmeta, bool limit, st_emit_fn emit,
                          void *arg) {
    em_status s = EM_OK;
    cJSON *root = cJSON_CreateObject();
    char *json = NULL, *tmp_path = NULL;
    FILE *f = NULL;
    if (root == NULL) goto nomem;
    if (nmeta > 0) {
        cJSON *md = cJSON_AddObjectToObject(root, "__metadata__");
        if (md == NULL) goto nomem;
        for (size_t i = 0; i < nmeta; i++)
            if (cJSON_AddStringToObject(md, meta[2 * i], meta[2 * i + 1]) == NULL) goto nomem;
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        if (e == NULL) goto nomem;
        cJSON_AddItemToObject(root, t[i].name, e);
        if (cJSON_AddStringToObject(e, "dtype", st_dtype_name(t[i].dt)) == NULL) goto nomem;
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        if (shape == NULL) goto nomem;
        for (int d = 0; d < t[i].rank; d++) {
            cJSON *v = cJSON_CreateNumber((double)t[i].shape[d]);
            if (v == NULL) goto nomem;
            cJSON_AddItemToArray(shape, v);
        }
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        if (offs == NULL) goto nomem;
        cJSON *b = cJSON_CreateNumber((double)offset),
              *en = cJSON_CreateNumber((double)(offset + t[i].bytes));
        if (b == NULL || en == NULL) {
            cJSON_Delete(b), cJSON_Delete(en);
            goto nomem;
        }
        cJSON_AddItemToArray(offs, b);
        cJSON_AddItemToArray(offs, en);
        offset += t[i].bytes;
    }
    json = cJSON_PrintUnformatted(root);
    if (json == NULL) goto nomem;
    size_t jlen = strlen(json), padded = (jlen + 7) / 8 * 8;
    if (limit && padded > ST_MAX_HEADER) {
        s = em_backend_set_error(EM_ERR_IO, "%s: %s: the header would be %zu bytes, more than "
                                 "the %llu that safetensors readers accept", fn, path, padded,
                                 (unsigned long long)ST_MAX_HEADER);
        goto done;
    }
    size_t plen = strlen(path);
    tmp_path = malloc(plen + 5);
    if (tmp_path == NULL) goto nomem;
    memcpy(tmp_path, path, plen);
    memcpy(tmp_path + plen, ".tmp", 5);
    f = fopen(tmp_path, "wb");
    if (f == NULL) {
        s = em_backend_set_error(EM_ERR_IO, "%s: %s: cannot open for writing", fn, tmp_path);
        goto done;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(json, 1, jlen, f) == jlen;
    for (size_t i = jlen; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    for (size_t i = 0; ok && i < n; i++)
        if ((s = emit(arg, i, f, &ok)) != EM_OK) goto done;
    if (fclose(f) != 0) ok = false;
    f = NULL;
    if (!ok) {
        s = em_backend_set_error(EM_ERR_IO, "%s: %s: write error", fn, tmp_path);
        goto done;
    }
    if (rename(tmp_path, path) != 0) {
        s = em_backend_set_error(EM_ERR_IO, "%s: cannot rename %s to %s", fn, tmp_path, path);
        goto done;
    }
    goto done;
nomem:
    s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
done:
    if (f != NULL) fclose(f);
    if (s != EM_OK && tmp_path != NULL) remove(tmp_path);
    free(tmp_path);
    cJSON_free(json);
    cJSON_Delete(root);
    return s;
}

/* em_safetensors_save's tensors: read back from their devices one at a time. */
typedef struct st_emit_tensors {
    const char *fn;
    const em_tensor *const *tensors;
    const struct st_put *puts;
} st_emit_tensors;

static em_status st_emit_tensor(void *arg, size_t i, FILE *f, bool *ok) {
    const st_emit_tensors *a = arg;
    const em_tensor *t = a->tensors[i];
    /* a quantized tensor: its layout's bytes as they are (its scales are little-endian) */
    bool quantized = em_tensor_kind(t) == EM_KIND_QUANTIZED;
    size_t esize = quantized ? 1 : em_dtype_size(em_tensor_dtype(t));
    size_t bytes = quantized ? (size_t)a->puts[i].bytes : (size_t)em_tensor_numel(t) * esize;
    if (bytes == 0) return EM_OK;
    uint8_t *buf = malloc(bytes);
    if (buf == NULL) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", a->fn);
    em_status s = em_tensor_to_data(t, buf, bytes);
    if (s == EM_OK) {
        if (!host_is_little_endian()) swap_elements(buf, bytes / esize, esize);
        *ok = fwrite(buf, 1, bytes, f) == bytes;
    }
    free(buf);
    return s;
}

em_status em_safetensors_save(const char *path, const char *const *names,
                              const em_tensor *const *tensors, size_t n) {
    static const char *fn = "em_safetensors_save";
    if (path == NULL) return em_backend_set_error(EM_ERR_ARG, "%s: path is NULL", fn);
    if (n > 0 && (names == NULL || tensors == NULL))
        return em_backend_set_error(EM_ERR_ARG, "%s: %s is NULL", fn,
                                    names == NULL ? "names" : "tensors");
    for (size_t i = 0; i < n; i++) {
        if (names[i] == NULL || names[i][0] == '\0')
            return em_backend_set_error(EM_ERR_ARG, "%s: names[%zu] is %s", fn, i,
                                        names[i] == NULL ? "NULL" : "empty");
        if (strcmp(names[i], "__metadata__") == 0)
            return em_backend_set_error(EM_ERR_ARG, "%s: names[%zu]: \"__metadata__\" is "
                                        "reserved", fn, i);
        if (tensors[i] == NULL)
            return em_backend_set_error(EM_ERR_ARG, "%s: tensors[%zu] is NULL", fn, i);
        size_t at = 0;
        char why[128];
        if (!emi_utf8_check((const uint8_t *)names[i], strlen(names[i]), &at, why, sizeof why))
            return em_backend_set_error(EM_ERR_ARG, "%s: names[%zu] is not valid UTF-8: %s at "
                                        "byte %zu", fn, i, why, at);
        if (em_tensor_kind(tensors[i]) == EM_KIND_QUANTIZED) {
            em_quant_scheme sc;
            em_status qs = em_tensor_scheme(tensors[i], &sc);
            if (qs != EM_OK) return qs;
            if (st_scheme_name(&sc) == NULL)
                return em_backend_set_error(EM_ERR_DTYPE, "%s: tensor \"%s\": its scheme "
                                            "(storage %s, kind %d) has no name in the file "
                                            "format", fn, names[i], em_dtype_name(sc.storage),
                                            (int)sc.kind);
            const int r = em_tensor_rank(tensors[i]);
            if (st_block_kind(sc.kind) && sc.axis != r - 1 && !(r == 2 && sc.axis == 0))
                return em_backend_set_error(EM_ERR_UNSUPPORTED, "%s: tensor \"%s\": a view "
                                            "whose blocks run along dim %d, neither the last "
                                            "nor the first of a 2-d one: save the tensor it "
                                            "views", fn, names[i], (int)sc.axis);
            continue;
        }
        if (st_dtype_name(em_tensor_dtype(tensors[i])) == NULL)
            return em_backend_set_error(EM_ERR_DTYPE, "%s: tensor \"%s\": dtype %s cannot be "
                                        "saved", fn, names[i],
                                        em_dtype_name(em_tensor_dtype(tensors[i])));
    }
    /* duplicates: neighbours once sorted */
    if (n > 1) {
        const char **sorted = malloc(n * sizeof *sorted);
        if (sorted == NULL) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
        memcpy(sorted, names, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, cmp_str);
        for (size_t i = 1; i < n; i++)
            if (strcmp(sorted[i - 1], sorted[i]) == 0) {
                em_status d = em_backend_set_error(EM_ERR_ARG, "%s: duplicate name \"%s\"", fn,
                                                   sorted[i]);
                free(sorted);
                return d;
            }
        free(sorted);
    }
    st_put *puts = calloc(n ? n : 1, sizeof *puts);
    int64_t *qbytes = calloc(n ? n : 1, sizeof *qbytes); /* the 1-d shape of a quantized one */
    em_tensor **views = calloc(n ? n : 1, sizeof *views);  /* what a transposed one writes */
    char **meta = calloc(2 * (n ? n : 1), sizeof *meta);  /* its key and value */
    size_t nmeta = 0;
    em_status s = puts && qbytes && meta && views
                      ? EM_OK
                      : em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    for (size_t i = 0; s == EM_OK && i < n; i++) {
        const em_tensor *t = tensors[i];
        if (em_tensor_kind(t) != EM_KIND_QUANTIZED) {
            puts[i] = (st_put){names[i], em_tensor_dtype(t), em_tensor_rank(t),
                               em_tensor_shape(t),
                               (uint64_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t))};
            continue;
        }
        em_quant_scheme sc;
        size_t nb = 0;
        s = em_tensor_scheme(t, &sc);
        const bool tr = s == EM_OK && st_block_kind(sc.kind) && em_tensor_rank(t) == 2 &&
                        sc.axis == 0;
        if (tr) { /* the bytes of its transpose, whose blocks run along the last dim */
            s = em_transpose(t, 0, 1, &views[i]);
            if (s == EM_OK) s = em_tensor_scheme(views[i], &sc);
        }
        if (s == EM_OK) {
            const em_tensor *b = views[i] ? views[i] : t;
            s = em_quant_nbytes(&sc, em_tensor_shape(b), em_tensor_rank(b), &nb);
        }
        if (s != EM_OK) break;
        qbytes[i] = (int64_t)nb;
        puts[i] = (st_put){names[i], EM_U8, 1, &qbytes[i], (uint64_t)nb};
        size_t len = strlen(names[i]);
        char *key = malloc(ST_QUANT_PREFIX_LEN + len + 1);
        char *val = st_quant_describe(&sc, em_tensor_shape(t), em_tensor_rank(t), tr);
        if (key == NULL || val == NULL) {
            free(key);
            cJSON_free(val);
            s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
            break;
        }
        memcpy(key, ST_QUANT_PREFIX, ST_QUANT_PREFIX_LEN);
        memcpy(key + ST_QUANT_PREFIX_LEN, names[i], len + 1);
        meta[2 * nmeta] = key;
        meta[2 * nmeta + 1] = val;
        nmeta++;
    }
    /* a transposed one's bytes are its transpose's */
    const em_tensor **src = s == EM_OK ? malloc((n ? n : 1) * sizeof *src) : NULL;
    if (s == EM_OK && !src) s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    for (size_t i = 0; s == EM_OK && i < n; i++) src[i] = views[i] ? views[i] : tensors[i];
    st_emit_tensors arg = {fn, src, puts};
    if (s == EM_OK)
        s = st_write(fn, path, puts, n, (const char *const *)meta, nmeta, false, st_emit_tensor,
                     &arg);
    for (size_t k = 0; meta && k < nmeta; k++) {
        free(meta[2 * k]);
        cJSON_free(meta[2 * k + 1]);
    }
    for (size_t i = 0; views && i < n; i++) em_tensor_release(views[i]);
    free(views);
    free(src);
    free(meta);
    free(qbytes);
    free(puts);
    return s;
}

/* emi_st_save: the bytes as given. */
static em_status st_emit_raw(void *arg, size_t i, FILE *f, bool *ok) {
    const emi_st_tensor *t = &((const emi_st_tensor *)arg)[i];
    if (t->bytes > 0) *ok = fwrite(t->data, 1, (size_t)t->bytes, f) == t->bytes;
    return EM_OK;
}

em_status emi_st_save(const char *fn, const char *path, const emi_st_tensor *t, size_t n,
                      const char *const *meta, size_t nmeta) {
    st_put *puts = calloc(n ? n : 1, sizeof *puts);
    if (puts == NULL) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    for (size_t i = 0; i < n; i++) {
        if (st_dtype_name(t[i].dtype) == NULL) {
            free(puts);
            return em_backend_set_error(EM_ERR_DTYPE, "%s: tensor \"%s\": dtype %s cannot be "
                                        "saved", fn, t[i].name, em_dtype_name(t[i].dtype));
        }
        puts[i] = (st_put){t[i].name, t[i].dtype, t[i].rank, t[i].shape, t[i].bytes};
    }
    em_status s = st_write(fn, path, puts, n, meta, nmeta, true, st_emit_raw, (void *)t);
    free(puts);
    return s;
}
