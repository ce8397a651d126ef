/* print.c — a tensor as text, summarised the way PyTorch's repr does it:
 *
 *     tensor([[ 0.1000, -2.0000],
 *             [ 3.5000,  4.0000]], shape=[2, 2], dtype=f32, device=cpu)
 *
 * One number format for the whole tensor: integers-valued floats as "1.", fixed "%.4f", or
 * "%.4e" when the magnitudes span more than 1000x or reach 1e8 or fall below 1e-4; every entry
 * right-aligned to the widest. Above 1000 elements each dim longer than 6 shows its first and
 * last 3 entries around "...". Values are read through em_cast to f64 (i64 for integers). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

#define PR_EDGE 3
#define PR_THRESHOLD 1000

typedef struct pr_out {
    char *buf;
    size_t cap, len; /* len: what the whole text needs, whatever cap is */
} pr_out;

static void pr_put(pr_out *o, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    for (int i = 0; i < n && i < (int)sizeof tmp - 1; i++) {
        if (o->len + 1 < o->cap) o->buf[o->len] = tmp[i];
        o->len++;
    }
    if (o->cap) o->buf[o->len < o->cap ? o->len : o->cap - 1] = '\0';
}

typedef enum pr_mode { PR_INT, PR_BOOL, PR_WHOLE, PR_FIXED, PR_SCI } pr_mode;

typedef struct pr_fmt {
    pr_mode mode;
    int width;
} pr_fmt;

static int pr_one(char *b, size_t cap, pr_mode mode, double d, int64_t i) {
    switch (mode) {
    case PR_INT: return snprintf(b, cap, "%lld", (long long)i);
    case PR_BOOL: return snprintf(b, cap, "%s", i ? "True" : "False");
    default: break;
    }
    if (isnan(d)) return snprintf(b, cap, "nan");
    if (isinf(d)) return snprintf(b, cap, d > 0 ? "inf" : "-inf");
    if (mode == PR_WHOLE) return snprintf(b, cap, "%.0f.", d);
    if (mode == PR_FIXED) return snprintf(b, cap, "%.4f", d);
    return snprintf(b, cap, "%.4e", d);
}

/* Whether flat index k is shown (every dim's index within the edges when summarising). */
static bool pr_shown(int64_t k, const int64_t *shape, int rank, bool summ) {
    if (!summ) return true;
    for (int d = rank - 1; d >= 0; d--) {
        int64_t i = k % shape[d];
        k /= shape[d];
        if (shape[d] > 2 * PR_EDGE && i >= PR_EDGE && i < shape[d] - PR_EDGE) return false;
    }
    return true;
}

static pr_fmt pr_choose(const double *dv, const int64_t *iv, const em_tensor *t, bool summ) {
    pr_fmt f = {PR_FIXED, 1};
    em_kind kind = em_dtype_kind(t->dtype);
    int64_t n = em_tensor_numel(t);
    if (kind == EM_KIND_BOOL) f.mode = PR_BOOL;
    else if (kind != EM_KIND_FLOAT) f.mode = PR_INT;
    else {
        bool whole = true, any = false;
        double lo = INFINITY, hi = 0;
        for (int64_t k = 0; k < n; k++) {
            if (!pr_shown(k, t->v.shape, t->v.rank, summ) || !isfinite(dv[k])) continue;
            double a = fabs(dv[k]);
            any = true;
            if (dv[k] != floor(dv[k])) whole = false;
            if (a > hi) hi = a;
            if (a != 0 && a < lo) lo = a;
        }
        if (!any) f.mode = PR_FIXED;
        else if (whole) f.mode = hi >= 1e8 ? PR_SCI : PR_WHOLE;
        else if (hi >= 1e8 || (lo < INFINITY && (hi / lo > 1000 || lo < 1e-4))) f.mode = PR_SCI;
        else f.mode = PR_FIXED;
    }
    for (int64_t k = 0; k < n; k++) {
        if (!pr_shown(k, t->v.shape, t->v.rank, summ)) continue;
        char b[64];
        int w = pr_one(b, sizeof b, f.mode, dv ? dv[k] : 0, iv ? iv[k] : 0);
        if (w > f.width) f.width = w;
    }
    return f;
}

/* The values of dims d.. at flat offset base, with `indent` columns before the first '['. */
static void pr_dim(pr_out *o, const em_tensor *t, const double *dv, const int64_t *iv,
                   pr_fmt f, int d, int64_t base, int indent, bool summ) {
    const int rank = t->v.rank;
    int64_t size = t->v.shape[d], inner = 1;
    for (int e = d + 1; e < rank; e++) inner *= t->v.shape[e];
    bool cut = summ && size > 2 * PR_EDGE;
    pr_put(o, "[");
    for (int64_t i = 0; i < size; i++) {
        if (cut && i == PR_EDGE) {
            if (d == rank - 1) pr_put(o, "..., ");
            else {
                pr_put(o, "...,");
                for (int nl = 0; nl < rank - d - 1; nl++) pr_put(o, "\n");
                pr_put(o, "%*s", indent + 1, "");
            }
            i = size - PR_EDGE;
        }
        if (d == rank - 1) {
            char b[64];
            int64_t k = base + i;
            pr_one(b, sizeof b, f.mode, dv ? dv[k] : 0, iv ? iv[k] : 0);
            pr_put(o, "%*s", f.width, b);
            if (i + 1 < size) pr_put(o, ", ");
        } else {
            pr_dim(o, t, dv, iv, f, d + 1, base + i * inner, indent + 1, summ);
            if (i + 1 < size) {
                pr_put(o, ",");
                for (int nl = 0; nl < rank - d - 1; nl++) pr_put(o, "\n");
                pr_put(o, "%*s", indent + 1, "");
            }
        }
    }
    pr_put(o, "]");
}

em_status em_tensor_format(const em_tensor *t, char *buf, size_t cap, size_t *len) {
    static const char fn[] = "em_tensor_format";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    if (!buf && cap) return emi_fail(EM_ERR_ARG, "%s: buf is NULL with cap %zu", fn, cap);
    pr_out o = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    int64_t n = em_tensor_numel(t);
    em_kind kind = em_dtype_kind(t->dtype);
    em_tensor *vals = NULL;
    em_status s = EM_OK;
    if (kind == EM_KIND_QUANTIZED) s = em_dequantize(t, &vals);
    else {
        em_tensor *plain = NULL;
        s = em_tensor_detach(t, &plain);
        if (s == EM_OK) s = em_cast(plain, kind == EM_KIND_FLOAT ? EM_F64 : EM_I64, &vals);
        em_tensor_release(plain);
    }
    double *dv = NULL;
    int64_t *iv = NULL;
    if (s == EM_OK && n > 0) {
        em_tensor *f = NULL;
        bool fl = kind == EM_KIND_FLOAT || kind == EM_KIND_QUANTIZED;
        if (kind == EM_KIND_QUANTIZED) s = em_cast(vals, EM_F64, &f);
        else {
            f = vals;
            em_tensor_retain(f);
        }
        void *mem = s == EM_OK ? malloc((size_t)n * 8) : NULL;
        if (s == EM_OK && !mem) s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
        if (s == EM_OK) s = em_tensor_to_data(f, mem, (size_t)n * 8);
        if (s == EM_OK) {
            if (fl) dv = mem;
            else iv = mem;
        } else free(mem);
        em_tensor_release(f);
    }
    em_tensor_release(vals);
    if (s != EM_OK) return s;
    bool summ = n > PR_THRESHOLD;
    pr_fmt f = pr_choose(dv, iv, t, summ);
    pr_put(&o, "tensor(");
    if (t->v.rank == 0) {
        char b[64];
        pr_one(b, sizeof b, f.mode, dv ? dv[0] : 0, iv ? iv[0] : 0);
        pr_put(&o, "%s", b);
    } else if (n == 0) pr_put(&o, "[]");
    else pr_dim(&o, t, dv, iv, f, 0, 0, (int)strlen("tensor("), summ);
    pr_put(&o, ", shape=[");
    for (int d = 0; d < t->v.rank; d++)
        pr_put(&o, d ? ", %lld" : "%lld", (long long)t->v.shape[d]);
    char dn[64] = "?";
    em_device_name(t->dev, dn, sizeof dn);
    pr_put(&o, "], dtype=%s, device=%s", em_dtype_name(t->dtype), dn);
    if (em_tensor_requires_grad(t)) pr_put(&o, ", requires_grad");
    pr_put(&o, ")");
    free(dv);
    free(iv);
    if (len) *len = o.len;
    return EM_OK;
}

em_status em_tensor_print(const em_tensor *t) {
    size_t need = 0;
    EMI_TRY(em_tensor_format(t, NULL, 0, &need));
    char *b = malloc(need + 1);
    if (!b) return emi_fail(EM_ERR_NOMEM, "em_tensor_print: out of memory");
    em_status s = em_tensor_format(t, b, need + 1, NULL);
    if (s == EM_OK) {
        fputs(b, stdout);
        fputc('\n', stdout);
    }
    free(b);
    return s;
}
