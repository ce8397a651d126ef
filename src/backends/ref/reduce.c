/*
 * reduce.c — the reference backend's reductions, cumulative sum and softmax.
 *
 * Plain loops: float dtypes are computed in double and rounded on store; int dtypes in int64
 * (sums and products wrap modulo 2^64, then to the output's width on store).
 *
 * Every reduction reads a "line" of elements: along one dim (base offset, stride, count), or
 * the whole input in row-major order (dim < 0). A walker restarts a line for each pass.
 */
#include "ref.h"

/* ---- walking a line of elements ---- */

typedef struct ref_line {
    const em_view *v;
    int whole;            /* the whole view in row-major order, else base + i * stride */
    int64_t base, stride; /* element offsets (line form) */
    int64_t n;            /* element count */
} ref_line;

typedef struct ref_walk {
    const ref_line *l;
    ref_iter it;
    int64_t i, off;
} ref_walk;

/** Starts a pass over the line. */
static void walk_start(ref_walk *w, const ref_line *l) {
    w->l = l;
    w->i = 0;
    if (l->whole)
        ref_iter_init(&w->it, 1, l->v, l->v);
    else
        w->off = l->base;
}

/** Writes the next element's offset into *off; returns 0 at the end of the line. */
static int walk_next(ref_walk *w, int64_t *off) {
    if (w->i >= w->l->n) return 0;
    if (w->l->whole) {
        *off = w->it.off[0];
        ref_iter_next(&w->it);
    } else {
        *off = w->off;
        w->off += w->l->stride;
    }
    w->i++;
    return 1;
}

/* ---- one reduction of one line ---- */

/** A float reduction of the line (sum, mean, prod, max, min, var, logsumexp). */
static double line_float(em_reduce_op op, const ref_line *l, const double *params) {
    const void *buf = l->v->buf;
    em_dtype dt = l->v->dtype;
    ref_walk w;
    int64_t off;
    double r;
    walk_start(&w, l);
    switch (op) {
    case EM_RED_SUM:
    case EM_RED_MEAN:
        r = 0;
        while (walk_next(&w, &off)) r += ref_ld(buf, dt, off);
        return op == EM_RED_MEAN ? r / (double)l->n : r;
    case EM_RED_PROD:
        r = 1;
        while (walk_next(&w, &off)) r *= ref_ld(buf, dt, off);
        return r;
    case EM_RED_MAX:
    case EM_RED_MIN: {
        int first = 1;
        r = NAN;
        while (walk_next(&w, &off)) {
            double x = ref_ld(buf, dt, off);
            if (x != x) return x; /* NaN propagates */
            if (first || (op == EM_RED_MAX ? x > r : x < r)) r = x;
            first = 0;
        }
        return r;
    }
    case EM_RED_VAR: {
        /* Two passes: the mean, then the squared deviations. Like torch.var, the divisor is
         * max(n - correction, 0), so 0/0 gives NaN. */
        double mean = 0, m2 = 0, corr = params ? params[0] : 1.0;
        while (walk_next(&w, &off)) mean += ref_ld(buf, dt, off);
        mean /= (double)l->n;
        walk_start(&w, l);
        while (walk_next(&w, &off)) {
            double dx = ref_ld(buf, dt, off) - mean;
            m2 += dx * dx;
        }
        double div = (double)l->n - corr;
        return m2 / (div > 0 ? div : 0.0);
    }
    case EM_RED_LOGSUMEXP: {
        /* max first (NaN propagates); an infinite max is the result itself. */
        double m = -INFINITY, s = 0;
        while (walk_next(&w, &off)) {
            double x = ref_ld(buf, dt, off);
            if (x != x) return x;
            if (x > m) m = x;
        }
        if (isinf(m)) return m;
        walk_start(&w, l);
        while (walk_next(&w, &off)) s += exp(ref_ld(buf, dt, off) - m);
        return m + log(s);
    }
    default:
        return NAN;
    }
}

/** An int reduction of the line in int64 (sum and prod wrap; max, min). */
static int64_t line_int(em_reduce_op op, const ref_line *l) {
    const void *buf = l->v->buf;
    em_dtype dt = l->v->dtype;
    ref_walk w;
    int64_t off;
    uint64_t u;
    int64_t r = 0;
    int first = 1;
    walk_start(&w, l);
    switch (op) {
    case EM_RED_SUM:
        u = 0;
        while (walk_next(&w, &off)) u += (uint64_t)ref_ldi(buf, dt, off);
        return (int64_t)u;
    case EM_RED_PROD:
        u = 1;
        while (walk_next(&w, &off)) u *= (uint64_t)ref_ldi(buf, dt, off);
        return (int64_t)u;
    case EM_RED_MAX:
    case EM_RED_MIN:
        while (walk_next(&w, &off)) {
            int64_t x = ref_ldi(buf, dt, off);
            if (first || (op == EM_RED_MAX ? x > r : x < r)) r = x;
            first = 0;
        }
        return r;
    default:
        return 0;
    }
}

/** The index of the first maximum (or minimum) in the line; a NaN wins at once. */
static int64_t line_arg(em_reduce_op op, const ref_line *l) {
    const void *buf = l->v->buf;
    em_dtype dt = l->v->dtype;
    int is_max = op == EM_RED_ARGMAX;
    ref_walk w;
    int64_t off, best = 0;
    walk_start(&w, l);
    if (ref_is_float(dt)) {
        double r = 0;
        for (int64_t i = 0; walk_next(&w, &off); i++) {
            double x = ref_ld(buf, dt, off);
            if (x != x) return i;
            if (i == 0 || (is_max ? x > r : x < r)) {
                r = x;
                best = i;
            }
        }
    } else {
        int64_t r = 0;
        for (int64_t i = 0; walk_next(&w, &off); i++) {
            int64_t x = ref_ldi(buf, dt, off);
            if (i == 0 || (is_max ? x > r : x < r)) {
                r = x;
                best = i;
            }
        }
    }
    return best;
}

/** Reduces one line and stores the result at out's element offset `ooff`. */
static void reduce_line(em_reduce_op op, const em_view *out, int64_t ooff, const ref_line *l,
                        const double *params) {
    if (op == EM_RED_ARGMAX || op == EM_RED_ARGMIN)
        ref_sti(out->buf, out->dtype, ooff, line_arg(op, l));
    else if (ref_is_float(l->v->dtype))
        ref_st(out->buf, out->dtype, ooff, line_float(op, l, params));
    else
        ref_sti(out->buf, out->dtype, ooff, line_int(op, l));
}

/** `v` with dim's extent set to 1: iterating it visits the first element of each line. */
static em_view lines_view(const em_view *v, int dim) {
    em_view r = *v;
    r.shape[dim] = 1;
    return r;
}

em_status ref_reduce(void *ctx, em_reduce_op op, const em_view *out, const em_view *in, int dim,
                     const double *params) {
    (void)ctx;
    if (dim < 0) {
        ref_line l = {in, 1, 0, 0, ref_numel(in)};
        reduce_line(op, out, out->offset, &l, params);
        return EM_OK;
    }
    em_view heads = lines_view(in, dim);
    ref_iter it;
    ref_iter_init(&it, 2, out, &heads);
    for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it)) {
        ref_line l = {in, 0, it.off[1], in->strides[dim], in->shape[dim]};
        reduce_line(op, out, it.off[0], &l, params);
    }
    return EM_OK;
}

em_status ref_cumsum(void *ctx, const em_view *out, const em_view *in, int dim) {
    (void)ctx;
    em_view oh = lines_view(out, dim), ih = lines_view(in, dim);
    int64_t n = in->shape[dim], os = out->strides[dim], is = in->strides[dim];
    int fl = ref_is_float(in->dtype);
    ref_iter it;
    ref_iter_init(&it, 2, &oh, &ih);
    for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it)) {
        double s = 0;
        uint64_t u = 0;
        for (int64_t j = 0; j < n; j++) {
            int64_t io = it.off[1] + j * is, oo = it.off[0] + j * os;
            if (fl) {
                s += ref_ld(in->buf, in->dtype, io);
                ref_st(out->buf, out->dtype, oo, s);
            } else {
                u += (uint64_t)ref_ldi(in->buf, in->dtype, io);
                ref_sti(out->buf, out->dtype, oo, (int64_t)u);
            }
        }
    }
    return EM_OK;
}

/* cumprod (double products for floats, wrapping int64 ones for integers), cummax / cummin
 * (PyTorch's: an element >= (<=) the running value or NaN replaces it, with its index). */
em_status ref_cumulative(void *ctx, em_cum_op op, const em_view *values, const em_view *indices,
                         const em_view *in, int dim) {
    (void)ctx;
    em_view oh = lines_view(values, dim), ih = lines_view(in, dim), xh;
    int64_t n = in->shape[dim], os = values->strides[dim], is = in->strides[dim], ks = 0;
    int fl = ref_is_float(in->dtype);
    ref_iter it;
    if (op == EM_CUM_PROD) {
        ref_iter_init(&it, 2, &oh, &ih);
    } else {
        xh = lines_view(indices, dim);
        ks = indices->strides[dim];
        const em_view *vs[3] = {&oh, &ih, &xh};
        ref_iter_init4(&it, 3, vs);
    }
    for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it)) {
        double p = 1, m = 0;
        uint64_t u = 1;
        int64_t mi = 0, k = 0;
        for (int64_t j = 0; j < n; j++) {
            int64_t io = it.off[1] + j * is, oo = it.off[0] + j * os;
            if (op == EM_CUM_PROD) {
                if (fl) {
                    p *= ref_ld(in->buf, in->dtype, io);
                    ref_st(values->buf, values->dtype, oo, p);
                } else {
                    u *= (uint64_t)ref_ldi(in->buf, in->dtype, io);
                    ref_sti(values->buf, values->dtype, oo, (int64_t)u);
                }
                continue;
            }
            bool take;
            if (fl) {
                double v = ref_ld(in->buf, in->dtype, io);
                take = j == 0 || v != v || (op == EM_CUM_MAX ? v >= m : v <= m);
                if (take) m = v;
                ref_st(values->buf, values->dtype, oo, m);
            } else {
                int64_t v = ref_ldi(in->buf, in->dtype, io);
                take = j == 0 || (op == EM_CUM_MAX ? v >= k : v <= k);
                if (take) k = v;
                ref_sti(values->buf, values->dtype, oo, k);
            }
            if (take) mi = j;
            ref_sti(indices->buf, EM_I64, it.off[2] + j * ks, mi);
        }
    }
    return EM_OK;
}

em_status ref_softmax(void *ctx, const em_view *out, const em_view *in, int dim, bool log_) {
    (void)ctx;
    em_view oh = lines_view(out, dim), ih = lines_view(in, dim);
    int64_t n = in->shape[dim], os = out->strides[dim], is = in->strides[dim];
    ref_iter it;
    ref_iter_init(&it, 2, &oh, &ih);
    for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it)) {
        /* Stable: subtract the line's max (NaN propagates through the arithmetic). */
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < n; j++) {
            double x = ref_ld(in->buf, in->dtype, it.off[1] + j * is);
            if (x > m || x != x) m = x;
            if (m != m) break;
        }
        for (int64_t j = 0; j < n; j++) s += exp(ref_ld(in->buf, in->dtype, it.off[1] + j * is) - m);
        double ls = log(s);
        for (int64_t j = 0; j < n; j++) {
            double d = ref_ld(in->buf, in->dtype, it.off[1] + j * is) - m;
            ref_st(out->buf, out->dtype, it.off[0] + j * os, log_ ? d - ls : exp(d) / s);
        }
    }
    return EM_OK;
}
