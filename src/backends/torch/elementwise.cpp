/* elementwise.cpp — the torch backend's elementwise kernels (torch_internal.h says how they are
 * written): unary, binary, binary_scalar and where, and the fused unary_backward and
 * adam_step, all on ATen operators.
 *
 * The semantics are ref's (src/backends/ref/elementwise.c, fused.c); where ATen differs, the
 * kernel composes ref's answer from other ATen ops:
 *   - sign keeps NaN and -0 (ATen's gives 0);
 *   - float remainder gives a zero the divisor's sign (ATen's keeps fmod's);
 *   - integer division floors, and a zero divisor gives 0 (ATen throws); x // -1 is the
 *     wrapping negation and x % -1 and x % 0 are 0 (INT64_MIN / -1 would trap): divisors 0
 *     and -1 are replaced by 1 and the results patched;
 *   - int clamp rounds its bounds inward (ceil lo, floor hi), in int64, and the result wraps
 *     to the dtype's width as ref's store does (ATen would refuse bounds outside the dtype);
 *     lo > hi after rounding gives lo below lo and hi elsewhere, as ref's test order does;
 *   - bool inputs of arithmetic ops are computed as int64 0/1 and stored as v != 0;
 *   - pow and atan2 on ints (float-only in ember's API) go through double and back as ref's
 *     cast does on x86 (INT64_MIN outside the int64 range);
 *   - float remainder is composed from fmod, whose vectorized form gives NaN for a subnormal
 *     divisor or a huge quotient (those elements are computed again by ATen's scalar loop);
 *   - sinh / cosh of f32 and bf16, and softplus with a threshold above 80, compute in double
 *     (f32 intermediates overflow where ref's double results are finite); f64 sinh / cosh
 *     past |x| = 709 and log1p of huge x are composed (ATen's overflow there too);
 *   - where reads a non-bool cond as ref does (as an int: a float is true when |c| >= 1).
 * f16 / bf16 are computed in f32 and rounded once on store. f32 / f64 results go straight into
 * the output view (the *_out forms) unless the output shares memory with an input view other
 * than itself (then through a temporary, so that no element is read after it was written). */
#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>

#include "torch_internal.h"

namespace {

using at::Tensor;

bool is_float(em_dtype dt) { return dt == EM_F32 || dt == EM_F64 || emt::is_half(dt); }

/* True when the output may not be written while `in` is still read: both views are in one
 * buffer but are not the same view (element for element writes are safe: the in-place `_`
 * ops). */
bool clash(const em_view *out, const em_view *in) {
    if (!in || out->buf != in->buf) return false;
    if (out->dtype != in->dtype || out->rank != in->rank || out->offset != in->offset)
        return true;
    for (int d = 0; d < out->rank; d++) {
        if (out->shape[d] != in->shape[d]) return true;
        if (out->shape[d] > 1 && out->strides[d] != in->strides[d]) return true;
    }
    return false;
}

/* Where a result is computed: the output view itself when it has the compute type and no
 * input clashes with it, else `scratch` when given (a fresh tensor of the compute type and
 * out's shape that the kernel owns, such as the f32 copy of an f16 input: one temporary fewer,
 * computed in place elementwise), else a fresh tensor of type ct; finish() stores it. */
bool same_shape(const Tensor &t, const em_view *v) {
    if (t.dim() != v->rank) return false;
    for (int d = 0; d < v->rank; d++)
        if (t.size(d) != v->shape[d]) return false;
    return true;
}

struct Dest {
    const em_view *out;
    Tensor t;
    bool direct;
    Dest(const em_view *o, at::ScalarType ct, bool no_clash, const Tensor &scratch = Tensor())
        : out(o) {
        direct = no_clash && emt::scalar_type(o->dtype) == ct;
        if (direct)
            t = emt::wrap(o);
        else if (scratch.defined() && scratch.scalar_type() == ct && same_shape(scratch, o))
            t = scratch;
        else
            t = at::empty(at::IntArrayRef(o->shape, (size_t)o->rank),
                          at::TensorOptions().dtype(ct));
    }
    void finish() {
        if (!direct) emt::store(out, t);
    }
};

/* A double tensor as ref's bin_int casts it to int64 ((int64_t)d): truncation; a value
 * outside the int64 range or NaN gives INT64_MIN, what x86's conversion (cvttsd2si) returns
 * for those (ref's cast is undefined in C there; ref runs on x86). */
Tensor to_i64_cast(const Tensor &d) {
    Tensor bad = d.isnan().logical_or_(d.ge(9.2233720368547758e18))
                     .logical_or_(d.lt(-9.2233720368547758e18));
    Tensor i = d.masked_fill(bad, 0).to(at::kLong);
    i.masked_fill_(bad, INT64_MIN);
    return i;
}

/* Python's a % b on floats as ref's rem_float computes it, before the sign of a zero:
 * ATen's remainder (fmod, then + b where the signs differ). Its vectorized fmod (Sleef) gives
 * NaN where the quotient a / b is out of its range (a subnormal divisor, or |a / b| past
 * about 1e38 in f32): those elements, NaN where the inputs are not, are computed again
 * through ATen's scalar loop (std::fmod), which an output of stride 2 selects. A remainder is
 * never infinite, so a sum that is not NaN says there is no NaN at all (no temporary). */
Tensor remainder_exact(const Tensor &A, const Tensor &B) {
    Tensor r = at::remainder(A, B);
    if (r.numel() == 0 || !std::isnan(r.sum().item<double>())) return r;
    Tensor bad = r.isnan().logical_and_(A.isfinite()).logical_and_(B.isnan().logical_not_())
                     .logical_and_(B.ne(0));
    if (bad.any().item<bool>()) {
        /* contiguous, so that masked_select and masked_scatter_ agree on the order (r follows
         * the inputs' layout, which may be permuted) */
        r = r.contiguous();
        bad = bad.contiguous();
        Tensor a = A.expand(r.sizes()).contiguous().masked_select(bad);
        Tensor b = B.expand(r.sizes()).contiguous().masked_select(bad);
        Tensor m = at::empty_strided({a.numel()}, {2}, a.options());
        at::fmod_out(m, a, b);
        m = at::where(m.ne(0).logical_and_(m.lt(0).ne(b.lt(0))), m.add(b), m);
        r.masked_scatter_(bad, m);
    }
    return r;
}

/* A double bound as an int64, rounded inward (ref's bound_to_int). */
int64_t bound_to_int(double v, bool lower) {
    v = lower ? std::ceil(v) : std::floor(v);
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

/* The range of an int dtype. */
void int_range(em_dtype dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case EM_I32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case EM_I16: *lo = INT16_MIN; *hi = INT16_MAX; break;
    case EM_I8: *lo = INT8_MIN; *hi = INT8_MAX; break;
    case EM_U8: *lo = 0; *hi = UINT8_MAX; break;
    case EM_BOOL: *lo = 0; *hi = 1; break;
    default: *lo = INT64_MIN; *hi = INT64_MAX; break;
    }
}

/* ---- unary ---- */

void unary_float(em_unary_op op, const em_view *out, const em_view *in, const double *p) {
    Tensor x = emt::in_c(in);
    const at::ScalarType ct = x.scalar_type();
    const bool ok = !clash(out, in);
    /* the f32 copy of an f16 / bf16 input takes the result (elementwise, in place) */
    const Tensor scratch = emt::is_half(in->dtype) ? x : Tensor();
    /* the ops with an ATen _out form of ref's meaning */
    auto put = [&](auto fn) {
        Dest d(out, em_unary_op_is_bool(op) ? at::kBool : ct, ok, scratch);
        fn(d.t);
        d.finish();
    };
    switch (op) {
    case EM_UN_NEG: put([&](Tensor &o) { at::neg_out(o, x); }); return;
    case EM_UN_ABS: put([&](Tensor &o) { at::abs_out(o, x); }); return;
    case EM_UN_EXP: put([&](Tensor &o) { at::exp_out(o, x); }); return;
    case EM_UN_LOG: put([&](Tensor &o) { at::log_out(o, x); }); return;
    case EM_UN_LOG1P: {
        /* ATen's log1p (Sleef) overflows to inf for x past about 1e38 (f32) or 1e307 (f64);
         * there 1 + x is x and log1p(x) is log(x) */
        Tensor big;
        if (in->dtype != EM_F16) big = x.gt(ct == at::kFloat ? 1e30 : 1e300);
        if (big.defined() && big.any().item<bool>()) {
            emt::store(out, at::where(big, x.log(), x.log1p()));
            return;
        }
        put([&](Tensor &o) { at::log1p_out(o, x); });
        return;
    }
    case EM_UN_SQRT: put([&](Tensor &o) { at::sqrt_out(o, x); }); return;
    case EM_UN_RSQRT: put([&](Tensor &o) { at::rsqrt_out(o, x); }); return;
    case EM_UN_SIN: put([&](Tensor &o) { at::sin_out(o, x); }); return;
    case EM_UN_COS: put([&](Tensor &o) { at::cos_out(o, x); }); return;
    case EM_UN_TANH: put([&](Tensor &o) { at::tanh_out(o, x); }); return;
    case EM_UN_SIGMOID: put([&](Tensor &o) { at::sigmoid_out(o, x); }); return;
    case EM_UN_RELU: put([&](Tensor &o) { at::clamp_min_out(o, x, at::Scalar(0.0)); }); return;
    case EM_UN_GELU: put([&](Tensor &o) { at::gelu_out(o, x, "none"); }); return;
    case EM_UN_SILU: put([&](Tensor &o) { at::silu_out(o, x); }); return;
    case EM_UN_ERF: put([&](Tensor &o) { at::erf_out(o, x); }); return;
    case EM_UN_FLOOR: put([&](Tensor &o) { at::floor_out(o, x); }); return;
    case EM_UN_CEIL: put([&](Tensor &o) { at::ceil_out(o, x); }); return;
    case EM_UN_ROUND: put([&](Tensor &o) { at::round_out(o, x); }); return; /* half to even */
    case EM_UN_RECIP: put([&](Tensor &o) { at::reciprocal_out(o, x); }); return;
    case EM_UN_SIGN: /* ATen's sign gives 0 for NaN; ref keeps NaN and -0 */
        put([&](Tensor &o) { at::where_out(o, x.gt(0).logical_or_(x.lt(0)), at::sign(x), x); });
        return;
    case EM_UN_CLAMP:
        put([&](Tensor &o) {
            at::clamp_out(o, x, c10::optional<at::Scalar>(at::Scalar(p[0])),
                          c10::optional<at::Scalar>(at::Scalar(p[1])));
        });
        return;
    case EM_UN_LOGICAL_NOT: put([&](Tensor &o) { at::logical_not_out(o, x); }); return;
    case EM_UN_SOFTPLUS:
        /* exp(beta x) overflows f32 from 88.7 on, where ref's double does not: a threshold
         * above that (PyTorch's default is 20) computes in double */
        if (ct == at::kFloat && p[1] > 80) {
            emt::store(out, at::softplus(x.to(at::kDouble), p[0], p[1]));
            return;
        }
        put([&](Tensor &o) { at::softplus_out(o, x, p[0], p[1]); });
        return;
    case EM_UN_TAN: put([&](Tensor &o) { at::tan_out(o, x); }); return;
    case EM_UN_ASIN: put([&](Tensor &o) { at::asin_out(o, x); }); return;
    case EM_UN_ACOS: put([&](Tensor &o) { at::acos_out(o, x); }); return;
    case EM_UN_ATAN: put([&](Tensor &o) { at::atan_out(o, x); }); return;
    case EM_UN_SINH: case EM_UN_COSH: {
        /* ATen's sinh / cosh compute exp(|x|) / 2, which overflows for |x| just below the
         * point where the result does (88.7 to 89.4 in f32, 709.8 to 710.5 in f64): f32 and
         * bf16 compute in double, and f64 takes exp(|x| - ln 2) (times sign x for sinh) for
         * |x| > 709, where exp(-|x|) no longer counts */
        const bool sh = op == EM_UN_SINH;
        if (ct == at::kFloat && in->dtype != EM_F16) {
            Tensor xd = x.to(at::kDouble);
            emt::store(out, sh ? xd.sinh() : xd.cosh());
            return;
        }
        if (ct == at::kDouble) {
            Tensor big = x.abs().gt(709.0);
            if (big.any().item<bool>()) {
                Tensor e = x.abs().sub_(0.69314718055994530942).exp_();
                if (sh) e = e.mul_(x.sign());
                emt::store(out, at::where(big, e, sh ? x.sinh() : x.cosh()));
                return;
            }
        }
        put([&](Tensor &o) {
            if (sh) at::sinh_out(o, x);
            else at::cosh_out(o, x);
        });
        return;
    }
    case EM_UN_EXPM1: put([&](Tensor &o) { at::expm1_out(o, x); }); return;
    case EM_UN_LOG2: put([&](Tensor &o) { at::log2_out(o, x); }); return;
    case EM_UN_LOG10: put([&](Tensor &o) { at::log10_out(o, x); }); return;
    case EM_UN_ISNAN: emt::store(out, x.isnan()); return;
    case EM_UN_ISINF: emt::store(out, x.isinf()); return;
    case EM_UN_ISFINITE: emt::store(out, x.isfinite()); return;
    case EM_UN_NAN_TO_NUM:
        put([&](Tensor &o) { at::nan_to_num_out(o, x, p[0], p[1], p[2]); });
        return;
    case EM_UN_COUNT: break;
    }
    emt::store(out, x); /* an op added later: ref returns x */
}

/* Int and bool inputs (ref's un_int, in int64 wrapping to the width on store). */
void unary_int(em_unary_op op, const em_view *out, const em_view *in, const double *p) {
    Tensor x = emt::in(in);
    /* bool inputs count 0 / 1 (neg(true) is -1, stored as true) */
    if (in->dtype == EM_BOOL && !em_unary_op_is_bool(op)) x = x.to(at::kLong);
    const at::ScalarType ct = x.scalar_type();
    const bool ok = !clash(out, in);
    auto put = [&](auto fn) {
        Dest d(out, em_unary_op_is_bool(op) ? at::kBool : ct, ok);
        fn(d.t);
        d.finish();
    };
    switch (op) {
    case EM_UN_NEG: put([&](Tensor &o) { at::neg_out(o, x); }); return;
    case EM_UN_ABS: put([&](Tensor &o) { at::abs_out(o, x); }); return;
    case EM_UN_RELU:
        put([&](Tensor &o) { at::clamp_min_out(o, x, at::Scalar((int64_t)0)); });
        return;
    case EM_UN_SIGN: put([&](Tensor &o) { at::sign_out(o, x); }); return;
    case EM_UN_CLAMP: {
        const int64_t lo = bound_to_int(p[0], true), hi = bound_to_int(p[1], false);
        int64_t dlo, dhi;
        int_range(in->dtype == EM_BOOL ? EM_I64 : in->dtype, &dlo, &dhi);
        if (lo <= hi && lo >= dlo && hi <= dhi) {
            /* bounds inside the dtype: ATen's clamp in the dtype gives ref's answer */
            put([&](Tensor &o) {
                at::clamp_out(o, x, c10::optional<at::Scalar>(at::Scalar(lo)),
                              c10::optional<at::Scalar>(at::Scalar(hi)));
            });
            return;
        }
        /* in int64: x < lo ? lo : x > hi ? hi : x, wrapped to the width on store */
        Tensor xl = x.to(at::kLong);
        Tensor r = lo <= hi ? xl.clamp(lo, hi)
                            : at::full_like(xl, hi).masked_fill_(xl.lt(lo), lo);
        emt::store(out, r);
        return;
    }
    case EM_UN_LOGICAL_NOT: put([&](Tensor &o) { at::logical_not_out(o, x); }); return;
    case EM_UN_ISNAN: case EM_UN_ISINF: emt::wrap(out).fill_(false); return;
    case EM_UN_ISFINITE: emt::wrap(out).fill_(true); return;
    default: break;
    }
    /* floor, ceil, round, nan_to_num and the float-only ops: ref returns x */
    emt::store(out, ok ? x : x.clone());
}

em_status tb_unary(void *, em_unary_op op, const em_view *out, const em_view *in,
                   const double *params) {
    EMT_BEGIN
    static const double none[3] = {0, 0, 0};
    const double *p = params ? params : none;
    if (is_float(in->dtype))
        unary_float(op, out, in, p);
    else
        unary_int(op, out, in, p);
    EMT_END("unary")
}

/* ---- binary ---- */

bool bin_arith(em_binary_op op) { return !em_binary_op_is_bool(op); }

/* out = a op b for tensors a and b of out's shape or broadcastable to it (b may be 0-d: the
 * scalar form), of the dtype dt (a's ember dtype); clashes: whether an input shares out's
 * memory in another view. */
void binary_t(em_binary_op op, const em_view *out, Tensor A, Tensor B, em_dtype dt,
              bool ok) {
    if (is_float(dt)) {
        if (emt::is_half(dt)) {
            A = A.to(at::kFloat);
            B = B.to(at::kFloat);
        }
        const at::ScalarType ct = A.scalar_type();
        /* f16 / bf16: a's f32 copy (when not broadcast) takes the result */
        Dest d(out, em_binary_op_is_bool(op) ? at::kBool : ct, ok,
               emt::is_half(dt) ? A : Tensor());
        Tensor &o = d.t;
        switch (op) {
        case EM_BIN_ADD: at::add_out(o, A, B); break;
        case EM_BIN_SUB: at::sub_out(o, A, B); break;
        case EM_BIN_MUL: at::mul_out(o, A, B); break;
        case EM_BIN_DIV: at::div_out(o, A, B); break;
        case EM_BIN_POW: at::pow_out(o, A, B); break;
        case EM_BIN_REM:
            /* ref's result always has the divisor's sign (a zero too: copysign(0, b), where
             * ATen keeps fmod's, the dividend's) */
            at::copysign_out(o, remainder_exact(A, B), B);
            break;
        case EM_BIN_MAX: at::maximum_out(o, A, B); break; /* NaN propagates, as ref's */
        case EM_BIN_MIN: at::minimum_out(o, A, B); break;
        case EM_BIN_EQ: at::eq_out(o, A, B); break;
        case EM_BIN_NE: at::ne_out(o, A, B); break;
        case EM_BIN_LT: at::lt_out(o, A, B); break;
        case EM_BIN_LE: at::le_out(o, A, B); break;
        case EM_BIN_GT: at::gt_out(o, A, B); break;
        case EM_BIN_GE: at::ge_out(o, A, B); break;
        case EM_BIN_AND: at::logical_and_out(o, A, B); break;
        case EM_BIN_OR: at::logical_or_out(o, A, B); break;
        case EM_BIN_ATAN2: at::atan2_out(o, A, B); break;
        case EM_BIN_XOR: at::logical_xor_out(o, A, B); break;
        case EM_BIN_COUNT: o.zero_(); break;
        }
        d.finish();
        return;
    }
    /* ints and bools: ref computes in int64 and wraps to the width on store. Sums, products
     * and comparisons in the dtype itself wrap alike; bools take part in arithmetic as 0 / 1. */
    if (dt == EM_BOOL && bin_arith(op)) {
        A = A.to(at::kLong);
        B = B.to(at::kLong);
    }
    switch (op) {
    case EM_BIN_DIV: case EM_BIN_REM: {
        /* floor division and Python's remainder; divisor 0: 0; x // -1 wraps; x % -1: 0 */
        Tensor a64 = A.to(at::kLong), b64 = B.to(at::kLong);
        Tensor zero = b64.eq(0), m1 = b64.eq(-1);
        Tensor bs = b64.masked_fill(zero.logical_or(m1), 1);
        Tensor r;
        if (op == EM_BIN_REM) {
            r = at::remainder(a64, bs); /* x % 1 is 0: the answer for 0 and -1 too */
        } else {
            r = at::div(a64, bs, "floor");
            r = at::where(m1, a64.neg(), r);
            r.masked_fill_(zero, 0);
        }
        emt::store(out, r);
        return;
    }
    case EM_BIN_POW: case EM_BIN_ATAN2: { /* float-only ops: through double, as ref */
        Tensor ad = A.to(at::kDouble), bd = B.to(at::kDouble);
        Tensor r = op == EM_BIN_POW ? at::pow(ad, bd) : at::atan2(ad, bd);
        emt::store(out, to_i64_cast(r));
        return;
    }
    default: break;
    }
    Dest d(out, em_binary_op_is_bool(op) ? at::kBool : A.scalar_type(), ok);
    Tensor &o = d.t;
    switch (op) {
    case EM_BIN_ADD: at::add_out(o, A, B); break;
    case EM_BIN_SUB: at::sub_out(o, A, B); break;
    case EM_BIN_MUL: at::mul_out(o, A, B); break;
    case EM_BIN_MAX: at::maximum_out(o, A, B); break;
    case EM_BIN_MIN: at::minimum_out(o, A, B); break;
    case EM_BIN_EQ: at::eq_out(o, A, B); break;
    case EM_BIN_NE: at::ne_out(o, A, B); break;
    case EM_BIN_LT: at::lt_out(o, A, B); break;
    case EM_BIN_LE: at::le_out(o, A, B); break;
    case EM_BIN_GT: at::gt_out(o, A, B); break;
    case EM_BIN_GE: at::ge_out(o, A, B); break;
    case EM_BIN_AND: at::logical_and_out(o, A, B); break;
    case EM_BIN_OR: at::logical_or_out(o, A, B); break;
    case EM_BIN_XOR: at::logical_xor_out(o, A, B); break;
    default: o.zero_(); break;
    }
    d.finish();
}

em_status tb_binary(void *, em_binary_op op, const em_view *out, const em_view *a,
                    const em_view *b) {
    EMT_BEGIN
    binary_t(op, out, emt::in(a), emt::in(b), a->dtype, !clash(out, a) && !clash(out, b));
    EMT_END("binary")
}

em_status tb_binary_scalar(void *, em_binary_op op, const em_view *out, const em_view *a,
                           double s) {
    EMT_BEGIN
    const em_dtype dt = a->dtype;
    Tensor B;
    if (is_float(dt)) {
        /* s is a value of a's dtype: exact in the compute type */
        B = at::full({}, s, at::TensorOptions().dtype(emt::compute_type(dt)));
    } else {
        const int64_t y = s != s                         ? 0
                          : s >= 9.2233720368547758e18  ? INT64_MAX
                          : s <= -9.2233720368547758e18 ? INT64_MIN
                                                        : (int64_t)s;
        int64_t lo, hi;
        int_range(dt, &lo, &hi);
        /* in a's dtype when it holds y (always, as the core casts s), else in int64 */
        if (y >= lo && y <= hi)
            B = at::full({}, y, at::TensorOptions().dtype(emt::scalar_type(dt)));
        else
            B = at::full({}, y, at::TensorOptions().dtype(at::kLong));
    }
    Tensor A = emt::in(a);
    if (!is_float(dt) && B.scalar_type() != A.scalar_type()) A = A.to(at::kLong);
    binary_t(op, out, A, B, B.scalar_type() == at::kLong && dt != EM_I64 ? EM_I64 : dt,
             !clash(out, a));
    EMT_END("binary_scalar")
}

/* ---- where ---- */

em_status tb_where(void *, const em_view *out, const em_view *cond, const em_view *a,
                   const em_view *b) {
    EMT_BEGIN
    Tensor c = emt::in(cond);
    /* ref reads cond as an int (floats truncated, NaN 0): nonzero when |c| >= 1 */
    if (c.is_floating_point())
        c = c.abs().ge(1.0);
    else if (c.scalar_type() != at::kBool)
        c = c.ne(0);
    Tensor A = emt::in(a), B = emt::in(b);
    /* bit for bit in the dtype (f16 / bf16 included: nothing is computed) */
    Dest d(out, A.scalar_type(),
           !clash(out, cond) && !clash(out, a) && !clash(out, b));
    at::where_out(d.t, c, A, B);
    d.finish();
    EMT_END("where")
}

/* ---- fused: unary_backward ---- */

/* 'x' or 'y': the value the op's gradient reads; 0: not fused. */
char ub_reads(em_unary_op op) {
    switch (op) {
    case EM_UN_ABS: case EM_UN_LOG: case EM_UN_LOG1P: case EM_UN_SIN: case EM_UN_COS:
    case EM_UN_GELU: case EM_UN_SILU: case EM_UN_ERF: case EM_UN_CLAMP:
        return 'x';
    case EM_UN_EXP: case EM_UN_SQRT: case EM_UN_RSQRT: case EM_UN_TANH: case EM_UN_SIGMOID:
    case EM_UN_RECIP: case EM_UN_RELU:
        return 'y';
    default: return 0;
    }
}

em_status tb_unary_backward(void *, em_unary_op op, const em_view *gx, const em_view *x,
                            const em_view *y, const em_view *gy, const double *params) {
    const char reads = ub_reads(op);
    if (!reads)
        return emt::fail(EM_ERR_UNSUPPORTED, "torch: unary_backward: op %d is not fused",
                         (int)op);
    if (reads == 'x' && !x)
        return emt::fail(EM_ERR_ARG, "torch: unary_backward: op %d reads x", (int)op);
    if (reads == 'y' && !y)
        return emt::fail(EM_ERR_ARG, "torch: unary_backward: op %d reads y", (int)op);
    const em_view *v = x ? x : y; /* as ref: the one given (the core gives only one) */
    if (!is_float(gx->dtype) || v->dtype != gx->dtype || gy->dtype != gx->dtype)
        return emt::fail(EM_ERR_UNSUPPORTED, "torch: unary_backward: float dtypes only");
    EMT_BEGIN
    Tensor V = emt::in_c(v), G = emt::in_c(gy);
    Dest d(gx, V.scalar_type(), !clash(gx, v) && !clash(gx, gy),
           emt::is_half(gx->dtype) ? G : Tensor());
    Tensor &o = d.t;
    switch (op) {
    case EM_UN_ABS: /* sign(x), NaN kept (0 at 0) */
        at::mul_out(o, G, at::where(V.isnan(), V, at::sign(V)));
        break;
    case EM_UN_LOG: at::div_out(o, G, V); break;
    case EM_UN_LOG1P: at::div_out(o, G, V.add(1.0)); break;
    case EM_UN_SIN: at::mul_out(o, G, V.cos()); break;
    case EM_UN_COS: at::mul_out(o, G, V.sin().neg_()); break;
    case EM_UN_GELU: at::gelu_backward_out(o, G, V, "none"); break;
    case EM_UN_SILU: at::silu_backward_out(o, G, V); break;
    case EM_UN_ERF: /* 2/sqrt(pi) exp(-x^2) */
        at::mul_out(o, G, V.mul(V).neg_().exp_().mul_(1.12837916709551257390));
        break;
    case EM_UN_CLAMP: { /* gy where lo <= x <= hi (NaN x: 0) */
        static const double none[2] = {0, 0};
        const double *p = params ? params : none;
        Tensor keep = V.ge(p[0]).logical_and_(V.le(p[1]));
        at::where_out(o, keep, G, at::zeros({}, G.options()));
        break;
    }
    case EM_UN_EXP: at::mul_out(o, G, V); break;
    case EM_UN_SQRT: at::div_out(o, G, V.mul(2.0)); break;
    case EM_UN_RSQRT: at::mul_out(o, G, V.mul(-0.5).mul_(V).mul_(V)); break;
    case EM_UN_TANH: at::mul_out(o, G, V.mul(V).neg_().add_(1.0)); break; /* 1 - y^2 */
    case EM_UN_SIGMOID: at::mul_out(o, G, V.neg().add_(1.0).mul_(V)); break; /* y (1 - y) */
    case EM_UN_RECIP: at::mul_out(o, G, V.mul(V).neg_()); break;
    case EM_UN_RELU: at::where_out(o, V.gt(0), G, at::zeros({}, G.options())); break;
    default: break; /* not reached: ub_reads */
    }
    d.finish();
    EMT_END("unary_backward")
}

/* ---- fused: adam_step ---- */

em_status tb_adam_step(void *, const em_view *param, const em_view *exp_avg,
                       const em_view *exp_avg_sq, const em_view *grad, const em_adam_args *a) {
    const em_dtype dt = param->dtype;
    if (!is_float(dt) || exp_avg->dtype != dt || exp_avg_sq->dtype != dt || grad->dtype != dt)
        return emt::fail(EM_ERR_UNSUPPORTED, "torch: adam_step: float dtypes only");
    EMT_BEGIN
    /* every scalar rounded to the arithmetic type first; each ATen op below is one rounded
     * operation of backend.h's sequence (no alpha forms, which could fuse a multiply-add) */
    const bool dbl = dt == EM_F64, half = emt::is_half(dt);
    auto S = [dbl](double v) { return at::Scalar(dbl ? v : (double)(float)v); };
    const at::Scalar gs = S(a->grad_scale), wd = S(a->weight_decay), b1 = S(a->beta1),
                     c1 = S(a->c1), b2 = S(a->beta2), c2 = S(a->c2), ds = S(a->denom_scale),
                     eps = S(a->denom_eps), ss = S(a->step_scale), decay = S(a->decay);
    /* param, exp_avg and exp_avg_sq are contiguous: flat; grad flat too (a copy when its
     * layout cannot be) */
    Tensor P = emt::wrap(param).reshape({-1}), M = emt::wrap(exp_avg).reshape({-1}),
           V = emt::wrap(exp_avg_sq).reshape({-1}), G = emt::in(grad).reshape({-1});
    const int64_t n = P.numel();
    /* a chunk at a time, so that the dozen passes below run in cache over two chunk-sized
     * temporaries (ATen splits each op over its threads from 32768 elements on) */
    const int64_t chunk = (int64_t)32768 * std::max(2, at::get_num_threads());
    Tensor d, t;
    for (int64_t s0 = 0; s0 < n; s0 += chunk) {
        const int64_t len = std::min(chunk, n - s0);
        Tensor p = P.narrow(0, s0, len), m = M.narrow(0, s0, len), v = V.narrow(0, s0, len),
               g = G.narrow(0, s0, len);
        Tensor pw = p, mw = m, vw = v;
        if (half) { /* in f32, stored rounded at the end */
            p = p.to(at::kFloat);
            m = m.to(at::kFloat);
            v = v.to(at::kFloat);
            g = g.to(at::kFloat);
        }
        if (!d.defined() || d.numel() != len) {
            d = at::empty({len}, p.options());
            t = at::empty({len}, p.options());
        }
        at::mul_out(d, g, gs);                   /* g = grad * grad_scale */
        if (a->weight_decay != 0) {
            at::mul_out(t, p, wd);               /* d = g + param * weight_decay */
            d.add_(t);
        }
        m.mul_(b1);                              /* m = m * beta1 + d * c1 */
        at::mul_out(t, d, c1);
        m.add_(t);
        v.mul_(b2);                              /* v = v * beta2 + (d * d) * c2 */
        at::mul_out(t, d, d);
        t.mul_(c2);
        v.add_(t);
        at::sqrt_out(t, v);                      /* den = sqrt(v) * denom_scale + denom_eps */
        t.mul_(ds).add_(eps);
        at::div_out(d, m, t);                    /* q = (m / den) * step_scale */
        d.mul_(ss);
        p.mul_(decay).sub_(d);                   /* param = param * decay - q */
        if (half) {
            pw.copy_(p);
            mw.copy_(m);
            vw.copy_(v);
        }
    }
    EMT_END("adam_step")
}

} // namespace

void emt_fill_elementwise(em_backend_ops *ops) {
    ops->unary = tb_unary;
    ops->binary = tb_binary;
    ops->binary_scalar = tb_binary_scalar;
    ops->where = tb_where;
    ops->unary_backward = tb_unary_backward;
    ops->adam_step = tb_adam_step;
}
