/* nn.cpp — the torch backend's nn kernels (torch_internal.h says how they are written):
 * matmul, convolution (direct, transposed, weight gradient), pooling and its backwards, the
 * normalizations and attention, on ATen's operators.
 *
 * Where ember's kernel contract and ATen's operators part:
 *   - pooling kernels get the output shape with ceil_mode already resolved (src/ops/pool.c);
 *     ATen wants the flag: it is found again from the shapes (pool_ceil);
 *   - ints in matmul accumulate in wrapping int64 (ref's rule): computed in int64, then
 *     narrowed on store;
 *   - batch_norm in eval mode: ATen returns no saved statistics (ember wants the running mean
 *     and 1/sqrt(var + eps)), and its eval backward rebuilds invstd from the running variance:
 *     both are written out here in ATen arithmetic from the given mean and invstd;
 *   - the normalizations (layer, batch, group, rms) compute in double whatever the dtype, as
 *     ref does, rounding once on store: ATen's f32 kernels (float moments) lose digits on
 *     rows with a large mean (4e-5 relative at a mean of 300, over the f32 tolerance);
 *   - rms_norm has no ATen operator in 1.13: composed;
 *   - sdpa: composed (matmul, masks, exp / sum, matmul); a row that attends to nothing gives
 *     lse -inf and a NaN output row, as ref; dropout draws ember's Philox keep mask (the
 *     mapping of src/backends/ref/random.c, written out here) so the numbers are ember's.
 */
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

#include <ATen/Parallel.h>

#include "torch_internal.h"

namespace {

int64_t numel(const em_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= v->shape[d];
    return n;
}

at::IntArrayRef shape_of(const em_view *v) {
    return at::IntArrayRef(v->shape, (size_t)v->rank);
}

at::TensorOptions copts(em_dtype dt) { return at::TensorOptions().dtype(emt::compute_type(dt)); }

/* An optional input in the compute type of dt (undefined when v is NULL). */
at::Tensor opt_in(const em_view *v, em_dtype dt) {
    if (!v) return at::Tensor();
    at::Tensor t = emt::in(v);
    at::ScalarType ct = emt::compute_type(dt);
    return t.scalar_type() == ct ? t : t.to(ct);
}

/* The normalizations compute their statistics in double, as ref does: ATen's f32 kernels
 * (group_norm's float moments) lose digits on data with a large mean. */
at::TensorOptions dopts() { return at::TensorOptions().dtype(at::kDouble); }
at::Tensor in_d(const em_view *v) { return emt::in(v).to(at::kDouble); }
at::Tensor opt_in_d(const em_view *v) { return v ? in_d(v) : at::Tensor(); }

/* f32 / f64 outputs are written through directly by *_out forms where given; this says
 * whether out's dtype is its compute type (so that its wrap() can be an ATen output). */
bool direct(const em_view *out) { return !emt::is_half(out->dtype); }

/* ---- matmul ---- */

em_status tn_matmul(void *, const em_view *out, const em_view *a, const em_view *b) {
    EMT_BEGIN
    emt::blas_single blas_; /* OpenBLAS on one thread (torch_internal.h) */
    if (numel(out) == 0) return EM_OK;
    const int r = out->rank;
    const int64_t m = out->shape[r - 2], n = out->shape[r - 1], k = a->shape[r - 1];
    int64_t batches = 1;
    for (int d = 0; d < r - 2; d++) batches *= out->shape[d];
    const bool fl = a->dtype == EM_F32 || a->dtype == EM_F64 || emt::is_half(a->dtype);
    at::Tensor A = emt::in(a), B = emt::in(b);
    if (fl) {
        A = emt::is_half(a->dtype) ? A.to(at::kFloat) : A;
        B = emt::is_half(b->dtype) ? B.to(at::kFloat) : B;
    } else {
        /* ints: wrapping int64 products and sums (ref), narrowed on store */
        A = A.to(at::kLong);
        B = B.to(at::kLong);
    }
    A = A.reshape({batches, m, k});
    B = B.reshape({batches, k, n});
    at::Tensor O = emt::wrap(out);
    if (fl && direct(out) && O.is_contiguous()) {
        emt::bmm_into(O.view({batches, m, n}), A, B);
    } else {
        emt::store(out, emt::bmm(A, B).view(shape_of(out)));
    }
    EMT_END("matmul")
}

/* ---- convolution ---- */

at::Tensor conv_run(const em_view *out, const em_view *x, const em_view *w, const em_view *bias,
                    const em_conv_args *a, bool transposed) {
    at::Tensor X = emt::in_c(x), W = emt::in_c(w);
    at::Tensor Bt = opt_in(bias, x->dtype);
    /* zero input channels (or an empty batch): ATen may refuse; the result is the bias */
    if (X.numel() == 0 || W.numel() == 0) {
        at::Tensor r = at::zeros(shape_of(out), copts(x->dtype));
        if (Bt.defined()) r.add_(Bt.view({1, -1, 1, 1}));
        return r;
    }
    return at::convolution(X, W, Bt, {a->stride[0], a->stride[1]},
                           {a->padding[0], a->padding[1]}, {a->dilation[0], a->dilation[1]},
                           transposed,
                           transposed ? at::IntArrayRef{a->output_padding[0],
                                                        a->output_padding[1]}
                                      : at::IntArrayRef{0, 0},
                           a->groups);
}

em_status tn_conv2d(void *, const em_view *out, const em_view *x, const em_view *w,
                    const em_view *bias, const em_conv_args *a) {
    EMT_BEGIN
    emt::blas_single blas_; /* OpenBLAS on one thread (torch_internal.h) */
    if (numel(out) == 0) return EM_OK;
    emt::store(out, conv_run(out, x, w, bias, a, false));
    EMT_END("conv2d")
}

em_status tn_conv_transpose2d(void *, const em_view *out, const em_view *x, const em_view *w,
                              const em_view *bias, const em_conv_args *a) {
    EMT_BEGIN
    emt::blas_single blas_; /* OpenBLAS on one thread (torch_internal.h) */
    if (numel(out) == 0) return EM_OK;
    emt::store(out, conv_run(out, x, w, bias, a, true));
    EMT_END("conv_transpose2d")
}

em_status tn_conv2d_weight_grad(void *, const em_view *gw, const em_view *x, const em_view *gy,
                                const em_conv_args *a) {
    EMT_BEGIN
    emt::blas_single blas_; /* OpenBLAS on one thread (torch_internal.h) */
    if (numel(gw) == 0) return EM_OK;
    at::Tensor X = emt::in_c(x), G = emt::in_c(gy);
    if (X.numel() == 0 || G.numel() == 0) {
        emt::store(gw, at::zeros(shape_of(gw), copts(x->dtype)));
        return EM_OK;
    }
    /* the weight only gives its shape (its values serve the input gradient, not asked) */
    at::Tensor W = at::empty(shape_of(gw), copts(x->dtype));
    auto r = at::convolution_backward(G, X, W, c10::nullopt, {a->stride[0], a->stride[1]},
                                      {a->padding[0], a->padding[1]},
                                      {a->dilation[0], a->dilation[1]}, false, {0, 0},
                                      a->groups, {false, true, false});
    emt::store(gw, std::get<1>(r));
    EMT_END("conv2d_weight_grad")
}

/* ---- pooling ---- */

/* PyTorch's pooling output size along one axis (src/ops/pool.c's rule). */
int64_t pool_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
    int64_t q = num >= 0 ? num / s : -((-num + s - 1) / s);
    int64_t o = q + 1;
    if (ceil && o > 0 && (o - 1) * s >= in + p) o--;
    return o;
}

/* The ceil_mode that gives an output of oh x ow from an input of h x w: the core resolved it
 * into the shape; ATen wants the flag back. */
bool pool_ceil(int64_t h, int64_t w, int64_t oh, int64_t ow, const em_pool_args *a,
               bool dilated) {
    const int64_t dy = dilated ? a->dilation[0] : 1, dx = dilated ? a->dilation[1] : 1;
    if (pool_size(h, a->kernel[0], a->stride[0], a->padding[0], dy, false) == oh &&
        pool_size(w, a->kernel[1], a->stride[1], a->padding[1], dx, false) == ow)
        return false;
    if (pool_size(h, a->kernel[0], a->stride[0], a->padding[0], dy, true) == oh &&
        pool_size(w, a->kernel[1], a->stride[1], a->padding[1], dx, true) == ow)
        return true;
    throw std::invalid_argument("pooling output " + std::to_string(oh) + "x" +
                                std::to_string(ow) + " fits neither ceil_mode");
}

em_status tn_max_pool2d(void *, const em_view *out, const em_view *indices, const em_view *x,
                        const em_pool_args *a) {
    EMT_BEGIN
    if (numel(out) == 0) return EM_OK;
    const bool ceil = pool_ceil(x->shape[2], x->shape[3], out->shape[2], out->shape[3], a, true);
    /* contiguous NCHW: ATen's plain kernel (a NaN wins, ties keep the first, as ref) */
    at::Tensor X = emt::in_c(x).contiguous();
    auto r = at::max_pool2d_with_indices(X, {a->kernel[0], a->kernel[1]},
                                         {a->stride[0], a->stride[1]},
                                         {a->padding[0], a->padding[1]},
                                         {a->dilation[0], a->dilation[1]}, ceil);
    emt::store(out, std::get<0>(r));
    if (indices) emt::store(indices, std::get<1>(r));
    EMT_END("max_pool2d")
}

em_status tn_avg_pool2d(void *, const em_view *out, const em_view *x, const em_pool_args *a) {
    EMT_BEGIN
    if (numel(out) == 0) return EM_OK;
    const bool ceil = pool_ceil(x->shape[2], x->shape[3], out->shape[2], out->shape[3], a, false);
    at::Tensor X = emt::in_c(x).contiguous();
    emt::store(out, at::avg_pool2d(X, {a->kernel[0], a->kernel[1]}, {a->stride[0], a->stride[1]},
                                   {a->padding[0], a->padding[1]}, ceil, a->count_include_pad,
                                   c10::nullopt));
    EMT_END("avg_pool2d")
}

em_status tn_avg_pool2d_backward(void *, const em_view *gx, const em_view *gy,
                                 const em_pool_args *a) {
    EMT_BEGIN
    if (numel(gx) == 0) return EM_OK;
    if (numel(gy) == 0) {
        emt::store(gx, at::zeros(shape_of(gx), copts(gx->dtype)));
        return EM_OK;
    }
    const bool ceil = pool_ceil(gx->shape[2], gx->shape[3], gy->shape[2], gy->shape[3], a, false);
    at::Tensor G = emt::in_c(gy).contiguous();
    at::Tensor X = at::empty(shape_of(gx), copts(gx->dtype)); /* its shape only */
    emt::store(gx, at::avg_pool2d_backward(G, X, {a->kernel[0], a->kernel[1]},
                                           {a->stride[0], a->stride[1]},
                                           {a->padding[0], a->padding[1]}, ceil,
                                           a->count_include_pad, c10::nullopt));
    EMT_END("avg_pool2d_backward")
}

em_status tn_adaptive_avg_pool2d(void *, const em_view *out, const em_view *x) {
    EMT_BEGIN
    if (numel(out) == 0) return EM_OK;
    at::Tensor X = emt::in_c(x).contiguous();
    emt::store(out, at::_adaptive_avg_pool2d(X, {out->shape[2], out->shape[3]}));
    EMT_END("adaptive_avg_pool2d")
}

em_status tn_adaptive_avg_pool2d_backward(void *, const em_view *gx, const em_view *gy) {
    EMT_BEGIN
    if (numel(gx) == 0) return EM_OK;
    if (numel(gy) == 0) {
        emt::store(gx, at::zeros(shape_of(gx), copts(gx->dtype)));
        return EM_OK;
    }
    at::Tensor G = emt::in_c(gy).contiguous();
    at::Tensor X = at::empty(shape_of(gx), copts(gx->dtype)); /* its shape only */
    emt::store(gx, at::_adaptive_avg_pool2d_backward(G, X));
    EMT_END("adaptive_avg_pool2d_backward")
}

/* ---- normalization ---- */

em_status tn_layer_norm(void *, const em_view *out, const em_view *x, const em_view *weight,
                        const em_view *bias, int64_t norm_numel, double eps) {
    EMT_BEGIN
    if (numel(out) == 0 || norm_numel == 0) return EM_OK;
    /* in double: ATen's f32 layer_norm loses digits on rows with a large mean */
    at::Tensor X = in_d(x);
    const int64_t rows = X.numel() / norm_numel;
    X = X.reshape({rows, norm_numel});
    at::Tensor W = opt_in_d(weight), B = opt_in_d(bias);
    if (W.defined()) W = W.reshape({norm_numel});
    if (B.defined()) B = B.reshape({norm_numel});
    at::Tensor r = std::get<0>(at::native_layer_norm(X, {norm_numel}, W, B, eps));
    emt::store(out, r.view(shape_of(out)));
    EMT_END("layer_norm")
}

/* A [C] statistic as [1, C, 1] for broadcasting over [N, C, S]. */
at::Tensor per_c(const at::Tensor &t) { return t.view({1, -1, 1}); }

em_status tn_batch_norm(void *, const em_view *out, const em_view *save_mean,
                        const em_view *save_invstd, const em_view *x, const em_view *weight,
                        const em_view *bias, const em_view *running_mean,
                        const em_view *running_var, bool training, double momentum,
                        double eps) {
    EMT_BEGIN
    if (numel(x) == 0) return EM_OK;
    const int64_t C = x->shape[1];
    at::Tensor X = in_d(x);
    at::Tensor W = opt_in_d(weight), B = opt_in_d(bias);
    const bool running = running_mean && running_var;
    if (training) {
        /* the running statistics are updated in place by ATen on double copies, stored back */
        at::Tensor RM, RV;
        if (running) {
            RM = opt_in_d(running_mean);
            RV = opt_in_d(running_var);
        }
        auto r = at::native_batch_norm(X, W, B, RM, RV, true, momentum, eps);
        emt::store(out, std::get<0>(r));
        if (save_mean) emt::store(save_mean, std::get<1>(r));
        if (save_invstd) emt::store(save_invstd, std::get<2>(r));
        if (running) {
            emt::store(running_mean, RM);
            emt::store(running_var, RV);
        }
    } else {
        /* eval: the running statistics (none: mean 0, variance 1, as ref) */
        at::Tensor mean = running ? opt_in_d(running_mean) : at::zeros({C}, dopts());
        at::Tensor var = running ? opt_in_d(running_var) : at::ones({C}, dopts());
        at::Tensor inv = var.add(eps).sqrt().reciprocal();
        at::Tensor y = X.sub(per_c(mean)).mul(per_c(inv));
        if (W.defined()) y = y.mul(per_c(W));
        if (B.defined()) y = y.add(per_c(B));
        emt::store(out, y);
        if (save_mean) emt::store(save_mean, mean);
        if (save_invstd) emt::store(save_invstd, inv);
    }
    EMT_END("batch_norm")
}

em_status tn_batch_norm_backward(void *, const em_view *gx, const em_view *gweight,
                                 const em_view *gbias, const em_view *gy, const em_view *x,
                                 const em_view *mean, const em_view *invstd,
                                 const em_view *weight, bool training) {
    EMT_BEGIN
    const em_dtype dt = x->dtype;
    const int64_t C = x->shape[1];
    if (numel(x) == 0) {
        /* no elements: zero sums (ref writes 0 into gweight and gbias) */
        if (gweight) emt::store(gweight, at::zeros({C}, copts(dt)));
        if (gbias) emt::store(gbias, at::zeros({C}, copts(dt)));
        return EM_OK;
    }
    at::Tensor G = in_d(gy), X = in_d(x);
    at::Tensor M = in_d(mean), I = in_d(invstd);
    at::Tensor W = weight ? in_d(weight) : at::ones({C}, dopts());
    if (training) {
        auto r = at::native_batch_norm_backward(G, X, W, at::Tensor(), at::Tensor(), M, I, true,
                                                0.0, {gx != nullptr, gweight != nullptr,
                                                      gbias != nullptr});
        if (gx) emt::store(gx, std::get<0>(r));
        if (gweight) emt::store(gweight, std::get<1>(r));
        if (gbias) emt::store(gbias, std::get<2>(r));
    } else {
        /* eval: the statistics are constants; ATen's eval backward would rebuild invstd from
         * a running variance, so the three sums are written out here */
        if (gbias) emt::store(gbias, G.sum(at::IntArrayRef{0, 2}));
        if (gweight) emt::store(gweight, G.mul(X.sub(per_c(M)).mul(per_c(I))).sum(at::IntArrayRef{0, 2}));
        if (gx) emt::store(gx, G.mul(per_c(W.mul(I))));
    }
    EMT_END("batch_norm_backward")
}

em_status tn_group_norm(void *, const em_view *out, const em_view *save_mean,
                        const em_view *save_invstd, const em_view *x, const em_view *weight,
                        const em_view *bias, int64_t groups, double eps) {
    EMT_BEGIN
    if (numel(x) == 0) return EM_OK;
    const int64_t N = x->shape[0], C = x->shape[1], S = x->shape[2];
    at::Tensor X = in_d(x).contiguous();
    at::Tensor W = opt_in_d(weight), B = opt_in_d(bias);
    auto r = at::native_group_norm(X, W, B, N, C, S, groups, eps);
    emt::store(out, std::get<0>(r));
    if (save_mean) emt::store(save_mean, std::get<1>(r).view({N, groups}));
    if (save_invstd) emt::store(save_invstd, std::get<2>(r).view({N, groups}));
    EMT_END("group_norm")
}

em_status tn_rms_norm(void *, const em_view *out, const em_view *save_invrms, const em_view *x,
                      const em_view *weight, int64_t norm_numel, double eps) {
    EMT_BEGIN
    if (numel(x) == 0 || norm_numel == 0) return EM_OK;
    const em_dtype dt = x->dtype;
    /* ATen 1.13 has no rms_norm: x / sqrt(mean(x^2) + eps) * weight, in double as ref (then
     * rounded once: f16 / bf16 through f32, ember's conversion) */
    at::Tensor X = in_d(x).reshape({-1, norm_numel});
    at::Tensor inv = at::mean(X.square(), {1}, true).add_(eps).sqrt_().reciprocal_();
    at::Tensor y = X.mul(inv);
    if (weight) y = y.mul(in_d(weight).reshape({1, norm_numel}));
    emt::store(out, y.to(emt::compute_type(dt)).view(shape_of(out)));
    if (save_invrms) emt::store(save_invrms, inv.reshape(shape_of(save_invrms)));
    EMT_END("rms_norm")
}

/* ---- attention ---- */

/* Philox-4x32-10's keep decision for element n of a bernoulli(keep_p) draw keyed by seed: the
 * mapping of src/backends/ref/random.c (counter (n / 4, 0 hi, 2, 0), word n % 4, 24 bits),
 * which every backend reproduces so that dropout is the same everywhere. */
bool philox_keep(uint64_t seed, uint64_t n, double keep_p) {
    uint32_t c0 = (uint32_t)(n / 4), c1 = (uint32_t)((n / 4) >> 32), c2 = 2, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
        const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    const uint32_t w[4] = {c0, c1, c2, c3};
    return (double)(w[n % 4] >> 8) * (1.0 / 16777216.0) < keep_p;
}

/* The dropout factors [nb, L, S]: 1 / keep_p where Philox keeps the weight, 0 elsewhere. */
at::Tensor dropout_factors(int64_t nb, int64_t L, int64_t S, double dropout_p, uint64_t seed,
                           at::ScalarType ct) {
    const double keep_p = 1.0 - dropout_p, inv_keep = 1.0 / keep_p;
    at::Tensor f = at::empty({nb, L, S}, at::TensorOptions().dtype(at::kDouble));
    double *p = f.data_ptr<double>();
    const int64_t n = nb * L * S;
    at::parallel_for(0, n, 4096, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; i++) p[i] = philox_keep(seed, (uint64_t)i, keep_p) ? inv_keep : 0;
    });
    return f.to(ct);
}

/* The attention dims of q [B..., L, E] and v [B..., S, Ev]. */
struct att_dims {
    std::vector<int64_t> batch;
    int64_t nb, L, S, E, Ev;
};

att_dims att_dims_of(const em_view *q, const em_view *v) {
    const int r = q->rank;
    att_dims d;
    d.nb = 1;
    for (int i = 0; i < r - 2; i++) {
        d.batch.push_back(q->shape[i]);
        d.nb *= q->shape[i];
    }
    d.L = q->shape[r - 2];
    d.S = v->shape[r - 2];
    d.E = q->shape[r - 1];
    d.Ev = v->shape[r - 1];
    return d;
}

/* An operand [B..., X, Y] as [nb, X, Y] in the compute type ct. */
at::Tensor att_in(const em_view *v, int64_t nb, at::ScalarType ct) {
    at::Tensor t = emt::in(v);
    if (t.scalar_type() != ct) t = t.to(ct);
    const int r = v->rank;
    return t.reshape({nb, v->shape[r - 2], v->shape[r - 1]});
}

/* The scaled, masked scores [nb, L, S] (-inf where a query may not see a key). */
at::Tensor att_scores(const att_dims &d, const at::Tensor &Q, const at::Tensor &K,
                      const em_view *mask, bool causal, double scale, at::ScalarType ct) {
    at::Tensor s = emt::bmm(Q, K.transpose(1, 2)).mul_(scale);
    at::Tensor off; /* true: masked out */
    if (mask) {
        if (mask->dtype == EM_BOOL)
            off = att_in(mask, d.nb, at::kBool).logical_not();
        else
            s.add_(att_in(mask, d.nb, ct));
    }
    if (causal) {
        at::Tensor c = at::ones({d.L, d.S}, at::TensorOptions().dtype(at::kBool)).triu(1);
        off = off.defined() ? off.logical_or(c) : c.expand({d.nb, d.L, d.S});
    }
    if (off.defined()) s.masked_fill_(off, -std::numeric_limits<double>::infinity());
    return s;
}

/* The softmax weights P of the scores and each row's logsumexp (-inf for a row that attends to
 * nothing, whose weights are NaN, as ref's). */
void att_softmax(const at::Tensor &s, at::Tensor *P, at::Tensor *lse) {
    const double inf = std::numeric_limits<double>::infinity();
    at::Tensor m = std::get<0>(s.max(-1, true));
    at::Tensor dead = m.eq(-inf);
    at::Tensor ms = m.masked_fill(dead, 0);
    at::Tensor e = s.sub(ms).exp_();
    at::Tensor sum = e.sum(-1, true);
    *P = e.div_(sum); /* a dead row: 0 / 0 */
    *lse = sum.log().add_(ms).squeeze(-1);
}

em_status tn_sdpa(void *, const em_view *out, const em_view *lse, const em_view *q,
                  const em_view *k, const em_view *v, const em_view *mask, bool causal,
                  double scale, double dropout_p, uint64_t seed) {
    EMT_BEGIN
    emt::blas_single blas_; /* OpenBLAS on one thread (torch_internal.h) */
    const att_dims d = att_dims_of(q, v);
    if (d.nb * d.L == 0) return EM_OK;
    const at::ScalarType ct = emt::compute_type(q->dtype);
    at::Tensor P, L;
    if (d.S == 0) { /* no keys: every row attends to nothing */
        P = at::full({d.nb, d.L, 0}, NAN, at::TensorOptions().dtype(ct));
        L = at::full({d.nb, d.L}, -INFINITY, at::TensorOptions().dtype(ct));
        emt::store(out, at::full(shape_of(out), NAN, at::TensorOptions().dtype(ct)));
        emt::store(lse, L.view(shape_of(lse)));
        return EM_OK;
    }
    at::Tensor Q = att_in(q, d.nb, ct), K = att_in(k, d.nb, ct), V = att_in(v, d.nb, ct);
    at::Tensor s = att_scores(d, Q, K, mask, causal, scale, ct);
    att_softmax(s, &P, &L);
    if (dropout_p > 0) P.mul_(dropout_factors(d.nb, d.L, d.S, dropout_p, seed, ct));
    at::Tensor O = emt::bmm(P, V);
    emt::store(out, O.view(shape_of(out)));
    emt::store(lse, L.view(shape_of(lse)));
    EMT_END("sdpa")
}

em_status tn_sdpa_backward(void *, const em_view *dq, const em_view *dk, const em_view *dv,
                           const em_view *q, const em_view *k, const em_view *v,
                           const em_view *mask, const em_view *out, const em_view *dout,
                           const em_view *lse, bool causal, double scale, double dropout_p,
                           uint64_t seed) {
    (void)out, (void)lse; /* the weights are recomputed from q and k, as ref does */
    EMT_BEGIN
    emt::blas_single blas_; /* OpenBLAS on one thread (torch_internal.h) */
    const att_dims d = att_dims_of(q, v);
    const at::ScalarType ct = emt::compute_type(q->dtype);
    const at::TensorOptions o = at::TensorOptions().dtype(ct);
    if (d.nb == 0) return EM_OK;
    if (d.L == 0 || d.S == 0) {
        /* no queries: no gradient; no keys: every row attends to nothing (dq 0, dv NaN) */
        if (numel(dq)) emt::store(dq, at::zeros(shape_of(dq), o));
        if (numel(dk)) emt::store(dk, at::zeros(shape_of(dk), o));
        if (numel(dv)) emt::store(dv, at::zeros(shape_of(dv), o));
        return EM_OK;
    }
    at::Tensor Q = att_in(q, d.nb, ct), K = att_in(k, d.nb, ct), V = att_in(v, d.nb, ct);
    at::Tensor G = att_in(dout, d.nb, ct);
    at::Tensor s = att_scores(d, Q, K, mask, causal, scale, ct);
    at::Tensor P, L;
    att_softmax(s, &P, &L);
    at::Tensor dead = L.eq(-INFINITY).unsqueeze(-1); /* [nb, L, 1] */
    at::Tensor dP = emt::bmm(G, V.transpose(1, 2));   /* dout_i . v_j */
    at::Tensor Pd = P;
    if (dropout_p > 0) {
        at::Tensor F = dropout_factors(d.nb, d.L, d.S, dropout_p, seed, ct);
        Pd = P.mul(F);
        dP.mul_(F);
    }
    at::Tensor dV = emt::bmm(Pd.transpose(1, 2), G);
    at::Tensor D = P.mul(dP).sum(-1, true);
    at::Tensor dS = P.mul(dP.sub(D)).mul_(scale);
    dS.masked_fill_(dead, 0); /* a dead row gives q and k nothing */
    emt::store(dq, emt::bmm(dS, K).view(shape_of(dq)));
    emt::store(dk, emt::bmm(dS.transpose(1, 2), Q).view(shape_of(dk)));
    emt::store(dv, dV.view(shape_of(dv)));
    EMT_END("sdpa_backward")
}

} // namespace

void emt_fill_nn(em_backend_ops *ops) {
    ops->matmul = tn_matmul;
    ops->conv2d = tn_conv2d;
    ops->conv_transpose2d = tn_conv_transpose2d;
    ops->max_pool2d = tn_max_pool2d;
    ops->avg_pool2d = tn_avg_pool2d;
    ops->adaptive_avg_pool2d = tn_adaptive_avg_pool2d;
    ops->conv2d_weight_grad = tn_conv2d_weight_grad;
    ops->avg_pool2d_backward = tn_avg_pool2d_backward;
    ops->adaptive_avg_pool2d_backward = tn_adaptive_avg_pool2d_backward;
    ops->layer_norm = tn_layer_norm;
    ops->batch_norm = tn_batch_norm;
    ops->batch_norm_backward = tn_batch_norm_backward;
    ops->group_norm = tn_group_norm;
    ops->rms_norm = tn_rms_norm;
    ops->sdpa = tn_sdpa;
    ops->sdpa_backward = tn_sdpa_backward;
}
