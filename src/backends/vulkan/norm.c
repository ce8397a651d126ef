/*
 * norm.c — the Vulkan backend's normalization slots (shaders/norm.comp): batch_norm and its
 * backward (each two dispatches: per-channel statistics into scratch memory, then an
 * elementwise pass; one dispatch cannot bind their 8 buffers), group_norm (one workgroup per
 * sample and group) and rms_norm (one workgroup per row). Views of any strides; float dtypes
 * only (the core composes the others). Semantics: ref's src/backends/ref/norm.c.
 */
#include <stdio.h>
#include <string.h>

#include "vk_internal.h"

#define NORM_MAXG 65535u /* workgroups of a dispatch dimension (norm.comp loops over more lines) */
#define NORM_RWG 256      /* norm.comp's RWG: the invocations of a per-line workgroup */
#define NORM_UNR 16       /* norm.comp's UNR: the elements an invocation takes an iteration */

/* EM_OK when a per-line kernel over `lines` lines of `len` elements, `passes` passes over
 * each, keeps every invocation's loop iterations (all loops together) well below 65,535:
 * lavapipe's loop limiter leaves loops silently beyond that (norm.comp). With 16 elements an
 * iteration that holds for any line a 128 MiB binding can hold; else EM_ERR_UNSUPPORTED. To
 * lift: split long lines over several workgroups (partial sums in scratch, then a combining
 * dispatch). */
static em_status nm_budget(const char *op, int64_t lines, int64_t len, int passes) {
    const int64_t rounds = (lines + NORM_MAXG - 1) / NORM_MAXG, blk = NORM_RWG * NORM_UNR;
    const int64_t iters = rounds * (passes * ((len + blk - 1) / blk) + 40);
    if (iters <= 60000) return EM_OK;
    return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan: %s: %lld lines of %lld elements "
                                "exceed one workgroup's loop budget", op, (long long)lines,
                                (long long)len);
}

static bool nm_float(em_dtype dt) {
    return dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16;
}

/* EM_OK when every present view of vs[0..n) has x's float dtype and the device runs it;
 * the int32 element indices of the shaders hold numel. */
static em_status nm_check(vk_dev *d, const char *op, const em_view *x, const em_view *const *vs,
                          int n) {
    if (!nm_float(x->dtype))
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan: %s: float dtypes only", op);
    for (int i = 0; i < n; i++)
        if (vs[i] && vs[i]->dtype != x->dtype)
            return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan: %s: mixed dtypes", op);
    if (vk_numel(x) > INT32_MAX)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan: %s: more than 2^31 elements",
                                    op);
    return vk_check_dtype(d, op, x->dtype);
}

/* The shader form of an optional view (zeros when absent). */
static vk_view_arg nm_view(const em_view *v) {
    vk_view_arg a;
    if (v) return vk_view(v);
    memset(&a, 0, sizeof a);
    return a;
}

static vk_buf *nm_buf(const em_view *v) { return v ? vk_vbuf(v) : NULL; }

/* A scalar k of norm.comp's SC(k): a double for f64, else a float. */
static void nm_scalar(vk_params *p, em_dtype dt, int k, double v) {
    if (dt == EM_F64) vk_set_f64(p, k, v);
    else p->f[k] = (float)v;
}

/* Workgroups for `lines` lines (the shader loops over the rest). */
static void nm_groups(int64_t lines, uint32_t g[3]) {
    g[0] = lines > (int64_t)NORM_MAXG ? NORM_MAXG : (uint32_t)lines;
    g[1] = g[2] = 1;
}

static void nm_name(char *name, size_t n, const char *kern, em_dtype dt) {
    snprintf(name, n, "%s.%s", kern, vk_dtype_tag(dt));
}

/* One batch_norm pass of kernel `kern` for dtype dt: p.v[i] the views vs[0..n) (absent ones
 * zero, bound as no buffer) followed by the scratch statistics st; p.i[0..2] = N, C, S of
 * dims, then flags[0..nflags); p's scalars as the caller set them. A per-channel pass runs a
 * workgroup per channel, an elementwise one an invocation per element of [N, C, S]. */
static em_status nm_bn_pass(vk_dev *d, const char *kern, em_dtype dt, vk_params *p,
                            const em_view *const *vs, int n, vk_buf *st, const int64_t dims[3],
                            const int32_t *flags, int nflags, bool per_channel) {
    vk_buf *bufs[8];
    for (int i = 0; i < n; i++) {
        p->v[i] = nm_view(vs[i]);
        bufs[i] = nm_buf(vs[i]);
    }
    bufs[n] = st;
    for (int i = 0; i < 3; i++) p->i[i] = (int32_t)dims[i];
    for (int i = 0; i < nflags; i++) p->i[3 + i] = flags[i];
    char name[48];
    nm_name(name, sizeof name, kern, dt);
    if (!per_channel) return vk_launch_1d(d, name, dims[0] * dims[1] * dims[2], p, n + 1, bufs);
    uint32_t g[3];
    nm_groups(dims[1], g);
    return vk_launch(d, name, g, p, n + 1, bufs);
}

em_status vk_batch_norm(void *ctx, const em_view *out, const em_view *save_mean,
                        const em_view *save_invstd, const em_view *x, const em_view *weight,
                        const em_view *bias, const em_view *running_mean,
                        const em_view *running_var, bool training, double momentum,
                        double eps) {
    vk_dev *d = ctx;
    const em_view *vs[] = {out, save_mean, save_invstd, weight, bias, running_mean, running_var};
    em_status s = nm_check(d, "batch_norm", x, vs, 7);
    if (s != EM_OK) return s;
    if (x->rank != 3 || out->rank != 3)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan: batch_norm: x of rank %d",
                                    x->rank);
    const int64_t N = x->shape[0], C = x->shape[1], S = x->shape[2];
    if (N * C * S == 0) return EM_OK;
    s = nm_budget("batch_norm", C, training ? N * S : 0, 2);
    if (s != EM_OK) return s;
    const size_t asz = x->dtype == EM_F64 ? 8 : 4;
    vk_buf *st;
    s = vk_scratch(d, (size_t)C * 3 * asz, &st);
    if (s != EM_OK) return s;
    const int64_t dims[3] = {N, C, S};
    /* statistics per channel, then the normalizing pass */
    vk_params p;
    memset(&p, 0, sizeof p);
    nm_scalar(&p, x->dtype, 0, momentum);
    nm_scalar(&p, x->dtype, 1, eps);
    const em_view *sv[] = {x, running_mean, running_var, save_mean, save_invstd};
    const int32_t sf[] = {training, running_mean != NULL, running_var != NULL,
                          save_mean != NULL, save_invstd != NULL};
    s = nm_bn_pass(d, "bn_stats", x->dtype, &p, sv, 5, st, dims, sf, 5, true);
    if (s == EM_OK) {
        memset(&p, 0, sizeof p);
        const em_view *av[] = {out, x, weight, bias};
        const int32_t af[] = {weight != NULL, bias != NULL};
        s = nm_bn_pass(d, "bn_apply", x->dtype, &p, av, 4, st, dims, af, 2, false);
    }
    vk_scratch_free(d, st);
    return s;
}

em_status vk_batch_norm_backward(void *ctx, const em_view *gx, const em_view *gweight,
                                 const em_view *gbias, const em_view *gy, const em_view *x,
                                 const em_view *mean, const em_view *invstd,
                                 const em_view *weight, bool training) {
    vk_dev *d = ctx;
    const em_view *vs[] = {gx, gweight, gbias, gy, mean, invstd, weight};
    em_status s = nm_check(d, "batch_norm_backward", x, vs, 7);
    if (s != EM_OK) return s;
    if (x->rank != 3 || gy->rank != 3 || (gx && gx->rank != 3))
        return em_backend_set_error(EM_ERR_UNSUPPORTED,
                                    "vulkan: batch_norm_backward: x of rank %d", x->rank);
    const int64_t N = x->shape[0], C = x->shape[1], S = x->shape[2];
    if (C == 0) return EM_OK;
    s = nm_budget("batch_norm_backward", C, N * S, 1);
    if (s != EM_OK) return s;
    const size_t asz = x->dtype == EM_F64 ? 8 : 4;
    vk_buf *st;
    s = vk_scratch(d, (size_t)C * 4 * asz, &st);
    if (s != EM_OK) return s;
    const int64_t dims[3] = {N, C, S};
    vk_params p;
    memset(&p, 0, sizeof p);
    const em_view *sv[] = {gy, x, mean, invstd, gweight, gbias};
    const int32_t sf[] = {gweight != NULL, gbias != NULL, mean != NULL, invstd != NULL};
    s = nm_bn_pass(d, "bnb_stats", x->dtype, &p, sv, 6, st, dims, sf, 4, true);
    if (s == EM_OK && gx && N * S > 0) {
        memset(&p, 0, sizeof p);
        const em_view *av[] = {gx, gy, x, weight};
        const int32_t af[] = {weight != NULL, training};
        s = nm_bn_pass(d, "bnb_apply", x->dtype, &p, av, 4, st, dims, af, 2, false);
    }
    vk_scratch_free(d, st);
    return s;
}

em_status vk_group_norm(void *ctx, const em_view *out, const em_view *save_mean,
                        const em_view *save_invstd, const em_view *x, const em_view *weight,
                        const em_view *bias, int64_t groups, double eps) {
    vk_dev *d = ctx;
    const em_view *vs[] = {out, save_mean, save_invstd, weight, bias};
    em_status s = nm_check(d, "group_norm", x, vs, 5);
    if (s != EM_OK) return s;
    if (x->rank != 3 || out->rank != 3)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan: group_norm: x of rank %d",
                                    x->rank);
    const int64_t N = x->shape[0], C = x->shape[1], S = x->shape[2], G = groups;
    if (G <= 0 || N * C * S == 0) return EM_OK;
    if (C % G != 0)
        return em_backend_set_error(EM_ERR_ARG, "vulkan: group_norm: %lld channels in %lld "
                                    "groups", (long long)C, (long long)G);
    s = nm_budget("group_norm", N * G, C / G * S, 3);
    if (s != EM_OK) return s;
    vk_params p;
    memset(&p, 0, sizeof p);
    p.v[0] = vk_view(x);
    p.v[1] = vk_view(out);
    p.v[2] = nm_view(weight);
    p.v[3] = nm_view(bias);
    p.v[4] = nm_view(save_mean);
    p.v[5] = nm_view(save_invstd);
    p.i[0] = (int32_t)N;
    p.i[1] = (int32_t)C;
    p.i[2] = (int32_t)S;
    p.i[3] = (int32_t)G;
    p.i[4] = weight != NULL;
    p.i[5] = bias != NULL;
    p.i[6] = save_mean != NULL;
    p.i[7] = save_invstd != NULL;
    nm_scalar(&p, x->dtype, 0, eps);
    uint32_t g[3];
    nm_groups(N * G, g);
    char name[48];
    nm_name(name, sizeof name, "group_norm", x->dtype);
    vk_buf *b[6] = {vk_vbuf(x),   vk_vbuf(out),      nm_buf(weight),
                    nm_buf(bias), nm_buf(save_mean), nm_buf(save_invstd)};
    return vk_launch(d, name, g, &p, 6, b);
}

em_status vk_rms_norm(void *ctx, const em_view *out, const em_view *save_invrms,
                      const em_view *x, const em_view *weight, int64_t norm_numel,
                      double eps) {
    vk_dev *d = ctx;
    const em_view *vs[] = {out, save_invrms, weight};
    em_status s = nm_check(d, "rms_norm", x, vs, 3);
    if (s != EM_OK) return s;
    if (x->rank != 2 || out->rank != 2)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan: rms_norm: x of rank %d",
                                    x->rank);
    const int64_t rows = x->shape[0], n = norm_numel;
    if (rows * n == 0) return EM_OK;
    s = nm_budget("rms_norm", rows, n, 2);
    if (s != EM_OK) return s;
    vk_params p;
    memset(&p, 0, sizeof p);
    p.v[0] = vk_view(x);
    p.v[1] = vk_view(out);
    p.v[2] = nm_view(weight);
    p.v[3] = nm_view(save_invrms);
    p.i[0] = (int32_t)rows;
    p.i[1] = (int32_t)n;
    p.i[2] = weight != NULL;
    p.i[3] = save_invrms != NULL;
    nm_scalar(&p, x->dtype, 0, eps);
    uint32_t g[3];
    nm_groups(rows, g);
    char name[48];
    nm_name(name, sizeof name, "rms_norm", x->dtype);
    vk_buf *b[4] = {vk_vbuf(x), vk_vbuf(out), nm_buf(weight), nm_buf(save_invrms)};
    return vk_launch(d, name, g, &p, 4, b);
}
