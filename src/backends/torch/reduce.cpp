/* reduce.cpp — the torch backend's reduce kernels (torch_internal.h says how they are written):
 * reduce, cumsum, softmax, cumulative, sort, gather, scatter_add and index_select, each on
 * ATen's operators, with ref's semantics (src/backends/ref/reduce.c, index.c):
 *   - float sums, means, maxima, softmax in the compute type (f32 for f16 / bf16), rounded
 *     once on store; products (reduce prod, cumprod) and var in double, as ref computes them
 *     (an f32 product whose partial products overflow f32 but not double stays finite);
 *     cumsum accumulates in double inside ATen (acc_type<float> on the CPU is double);
 *     an f32 softmax over a line longer than 1024 is computed in double (ATen's f32 kernel
 *     sums the line sequentially in f32 lanes);
 *   - integer sums, products and cumsums in int64, wrapping (the core allocates EM_I64);
 *   - max / min propagate NaN; argmax / argmin take the first extreme, a NaN at once
 *     (ATen's GreaterOrNan / LessOrNan, the same rule);
 *   - var is composed (two passes in double, divisor max(n - correction, 0), as ref: no ATen
 *     warning for a divisor <= 0, the same NaN / inf);
 *   - logsumexp is composed (max first; an infinite max is the result itself; empty: -inf);
 *   - cummax / cummin are ATen's, whose NaN and tie rules are the contract's;
 *   - sort is ATen's stable sort (NaN largest, as ref); f16 / bf16 are ordered by their f32
 *     values and the values gathered from the input, bit for bit;
 *   - gather / index_select move elements in their own dtype; scatter_add adds in out's dtype
 *     in index order (f16 rounded after each add, as ref; bool adds are an or). */
#include "torch_internal.h"

#include <cmath>
#include <limits>
#include <tuple>

namespace {

bool is_float(em_dtype dt) { return dt == EM_F32 || dt == EM_F64 || emt::is_half(dt); }

int64_t numel(const em_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= v->shape[d];
    return n;
}

/** An index view as an int64 tensor (I32 indices are widened). */
at::Tensor index_tensor(const em_view *v) {
    at::Tensor t = emt::in(v);
    return t.scalar_type() == at::kLong ? t : t.to(at::kLong);
}

/** Stores r into out; a double result bound for f16 / bf16 goes through f32 first (ref's
 *  rounding: double -> float -> half). */
void put(const em_view *out, at::Tensor r) {
    if (emt::is_half(out->dtype) && r.scalar_type() == at::kDouble) r = r.to(at::kFloat);
    emt::store(out, r);
}

/* ---- reduce ---- */

em_status tr_reduce(void *, em_reduce_op op, const em_view *out, const em_view *in, int dim,
                    const double *params) {
    EMT_BEGIN
    if (numel(out) == 0) return EM_OK;
    const bool fl = is_float(in->dtype);
    at::Tensor x = emt::in_c(in);
    int64_t d = dim;
    bool keep = true;
    if (dim < 0) { /* everything: the flat input in row-major order, a 0-d result */
        x = x.reshape({-1});
        d = 0;
        keep = false;
    }
    const int64_t n = x.size(d);
    /* a result of out's own dtype is written into out (ATen's _out forms) */
    const at::ScalarType ost = emt::scalar_type(out->dtype);
    at::Tensor r;
    switch (op) {
    case EM_RED_SUM:
        if (ost == (fl ? x.scalar_type() : at::kLong)) {
            at::Tensor o = emt::wrap(out);
            if (fl) at::sum_out(o, x, {d}, keep);
            else at::sum_out(o, x, {d}, keep, at::kLong);
            return EM_OK;
        }
        r = fl ? x.sum({d}, keep) : x.sum({d}, keep, at::kLong);
        break;
    case EM_RED_MEAN:
        if (!fl) x = x.to(at::kDouble);
        if (ost == x.scalar_type()) {
            at::Tensor o = emt::wrap(out);
            at::mean_out(o, x, {d}, keep);
            return EM_OK;
        }
        r = x.mean({d}, keep);
        break;
    case EM_RED_PROD:
        r = x.to(fl ? at::kDouble : at::kLong).prod(d, keep);
        break;
    case EM_RED_MAX:
    case EM_RED_MIN:
        if (ost == x.scalar_type()) {
            at::Tensor o = emt::wrap(out);
            if (op == EM_RED_MAX) at::amax_out(o, x, {d}, keep);
            else at::amin_out(o, x, {d}, keep);
            return EM_OK;
        }
        r = op == EM_RED_MAX ? x.amax({d}, keep) : x.amin({d}, keep);
        break;
    case EM_RED_ARGMAX:
    case EM_RED_ARGMIN:
        if (ost == at::kLong) {
            at::Tensor o = emt::wrap(out);
            if (op == EM_RED_ARGMAX) at::argmax_out(o, x, d, keep);
            else at::argmin_out(o, x, d, keep);
            return EM_OK;
        }
        r = op == EM_RED_ARGMAX ? x.argmax(d, keep) : x.argmin(d, keep);
        break;
    case EM_RED_VAR: {
        const double corr = params ? params[0] : 1.0;
        at::Tensor xd = x.to(at::kDouble);
        at::Tensor mean = xd.sum({d}, true).div((double)n);
        at::Tensor dev = xd - mean;
        const double div = (double)n - corr;
        r = (dev * dev).sum({d}, keep).div(div > 0 ? div : 0.0);
        break;
    }
    case EM_RED_LOGSUMEXP: {
        if (!fl) x = x.to(at::kDouble);
        if (n == 0) {
            emt::wrap(out).fill_(-std::numeric_limits<double>::infinity());
            return EM_OK;
        }
        at::Tensor m = x.amax({d}, true);
        /* an infinite maximum is the result itself: shift by 0 there (exp(x - 0) gives inf
         * for +inf, 0 for -inf everywhere); NaN propagates through the arithmetic */
        at::Tensor ms = at::where(m.isinf(), at::zeros({}, m.options()), m);
        r = (x - ms).exp_().sum({d}, keep).log_();
        r.add_(keep ? ms : ms.squeeze(d));
        break;
    }
    default:
        return emt::fail(EM_ERR_UNSUPPORTED, "torch: reduce: unknown op %d", (int)op);
    }
    put(out, r);
    EMT_END("reduce")
}

/* ---- cumsum, softmax, cumulative ---- */

em_status tr_cumsum(void *, const em_view *out, const em_view *in, int dim) {
    EMT_BEGIN
    if (numel(out) == 0) return EM_OK;
    at::Tensor x = emt::in_c(in);
    if (!is_float(in->dtype) && x.scalar_type() != at::kLong) x = x.to(at::kLong);
    /* floats: ATen's CPU cumsum accumulates in acc_type (double for f32, f64), as ref */
    if (x.scalar_type() == emt::scalar_type(out->dtype)) {
        at::Tensor o = emt::wrap(out);
        at::cumsum_out(o, x, dim);
    } else {
        put(out, x.cumsum(dim));
    }
    EMT_END("cumsum")
}

/** The longest line an f32 softmax is computed in f32 (its error stays under 1e-6). */
constexpr int64_t kSoftmaxF32Line = 1024;

em_status tr_softmax(void *, const em_view *out, const em_view *in, int dim, bool log) {
    EMT_BEGIN
    if (numel(out) == 0) return EM_OK;
    at::Tensor x = emt::in_c(in);
    /* ATen's f32 softmax sums a line in f32 lanes, sequentially: over a long line (a
     * vocabulary) that drifts past f32's tolerance from ref's double sum (8e-6 relative at
     * 60000 elements), so long f32 lines are computed in double */
    if (!is_float(in->dtype) || (in->dtype == EM_F32 && in->shape[dim] > kSoftmaxF32Line))
        x = x.to(at::kDouble);
    if (x.scalar_type() == emt::scalar_type(out->dtype)) {
        at::Tensor o = emt::wrap(out);
        if (log) at::_log_softmax_out(o, x, dim, false);
        else at::_softmax_out(o, x, dim, false);
    } else {
        put(out, log ? at::log_softmax(x, dim) : at::softmax(x, dim));
    }
    EMT_END(log ? "log_softmax" : "softmax")
}

em_status tr_cumulative(void *, em_cum_op op, const em_view *values, const em_view *indices,
                        const em_view *in, int dim) {
    EMT_BEGIN
    if (numel(in) == 0) return EM_OK;
    if (op == EM_CUM_PROD) {
        /* floats multiplied in double, ints in wrapping int64, as ref */
        at::Tensor x = emt::in(in).to(is_float(in->dtype) ? at::kDouble : at::kLong);
        put(values, x.cumprod(dim));
        return EM_OK;
    }
    if (op != EM_CUM_MAX && op != EM_CUM_MIN)
        return emt::fail(EM_ERR_UNSUPPORTED, "torch: cumulative: unknown op %d", (int)op);
    at::Tensor x = emt::in_c(in);
    if (values && indices && x.scalar_type() == emt::scalar_type(values->dtype)) {
        at::Tensor v = emt::wrap(values), i = emt::wrap(indices);
        if (op == EM_CUM_MAX) at::cummax_out(v, i, x, dim);
        else at::cummin_out(v, i, x, dim);
        return EM_OK;
    }
    /* ATen's cummax / cummin: x replaces the running value when x is NaN or (the running
     * value is not NaN and) x >= it (<= for min): the contract's rule */
    std::tuple<at::Tensor, at::Tensor> vi =
        op == EM_CUM_MAX ? at::cummax(x, dim) : at::cummin(x, dim);
    if (values) emt::store(values, std::get<0>(vi));
    if (indices) emt::store(indices, std::get<1>(vi));
    EMT_END(op == EM_CUM_PROD ? "cumprod" : op == EM_CUM_MAX ? "cummax" : "cummin")
}

/* ---- indexing ---- */

em_status tr_sort(void *, const em_view *values, const em_view *indices, const em_view *in,
                  int dim, bool descending) {
    EMT_BEGIN
    if (numel(in) == 0 || (!values && !indices)) return EM_OK;
    at::Tensor x = emt::in(in);
    const bool half = emt::is_half(in->dtype);
    if (!half && values && indices) {
        at::Tensor v = emt::wrap(values), i = emt::wrap(indices);
        at::sort_out(v, i, x, true, dim, descending);
        return EM_OK;
    }
    /* stable; NaN sorts as the largest value (last ascending, first descending), as ref */
    std::tuple<at::Tensor, at::Tensor> vi =
        at::sort(half ? x.to(at::kFloat) : x, true, dim, descending);
    if (values) emt::store(values, half ? x.gather(dim, std::get<1>(vi)) : std::get<0>(vi));
    if (indices) emt::store(indices, std::get<1>(vi));
    EMT_END("sort")
}

em_status tr_gather(void *, const em_view *out, const em_view *in, int dim,
                    const em_view *index) {
    EMT_BEGIN
    if (numel(out) == 0) return EM_OK;
    at::Tensor r = emt::in(in), ix = index_tensor(index);
    if (in->dtype != out->dtype) {
        emt::store(out, at::gather(r, dim, ix));
        return EM_OK;
    }
    at::Tensor o = emt::wrap(out);
    at::gather_out(o, r, dim, ix);
    EMT_END("gather")
}

em_status tr_scatter_add(void *, const em_view *out, int dim, const em_view *index,
                         const em_view *src) {
    EMT_BEGIN
    if (numel(index) == 0) return EM_OK;
    at::Tensor o = emt::wrap(out);
    at::Tensor s = emt::in(src);
    if (s.scalar_type() != o.scalar_type()) s = s.to(o.scalar_type());
    o.scatter_add_(dim, index_tensor(index), s);
    EMT_END("scatter_add")
}

em_status tr_index_select(void *, const em_view *out, const em_view *in, int dim,
                          const em_view *index) {
    EMT_BEGIN
    if (numel(out) == 0) return EM_OK;
    at::Tensor r = emt::in(in), ix = index_tensor(index);
    if (in->dtype != out->dtype) {
        emt::store(out, at::index_select(r, dim, ix));
        return EM_OK;
    }
    at::Tensor o = emt::wrap(out);
    at::index_select_out(o, r, dim, ix);
    EMT_END("index_select")
}

} // namespace

void emt_fill_reduce(em_backend_ops *ops) {
    ops->reduce = tr_reduce;
    ops->cumsum = tr_cumsum;
    ops->softmax = tr_softmax;
    ops->cumulative = tr_cumulative;
    ops->sort = tr_sort;
    ops->gather = tr_gather;
    ops->scatter_add = tr_scatter_add;
    ops->index_select = tr_index_select;
}
