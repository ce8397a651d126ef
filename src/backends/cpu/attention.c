/*
 * attention.c — the cpu backend's scaled dot-product attention (the sdpa and sdpa_backward
 * slots, backend.h), flash-attention style: the [L, S] scores never exist whole.
 *
 * Forward: tasks of (batch, block of AT_BQ query rows) on the pool. A task packs its query
 * block (times scale) and walks the keys in blocks of AT_BK: packs the blocks of k and v,
 * computes the AT_BQ x AT_BK scores (ember's GEMM at this level, on the calling thread),
 * applies causal and mask, and folds them into a running max, sum and output per row (online
 * softmax; the weights times v by the GEMM again); the output row is divided by the sum at
 * the end, and lse = max + log(sum) is saved for backward. Under causal a task stops at the
 * last key its last row sees.
 * Backward: tasks of one batch each (its dq accumulates in the task). Per key block: dk and dv
 * of the block, over the query blocks (under causal only those with rows >= the block's first
 * key): the weights recomputed from the saved lse, dv += P^T dout, dP = dout v^T,
 * dS = P (dP - D) with D = rowsum(dout * out), dk += dS^T q scale, dq += dS k scale.
 * Dropout draws random.c's bernoulli at the element index (b * L + i) * S + j of the weights,
 * as em_dropout on the composition's [B..., L, S] weights.
 *
 * f32 and f64 run in their own type, f16 and bf16 through f32 blocks (each operand converted
 * as it is packed; results rounded once on store). Operands of any strides (stride 0 for
 * broadcast batch dims) are read where they are. Blocks are small (AT_BQ x AT_BK of
 * scores, a few AT_BK x E of k and v) so that a task's working set stays in L1/L2.
 */
#include <math.h>
#include <stdatomic.h>

#include "cpu.h"
#include "half.h"

#define AT_BQ 64 /* query rows a block */
#define AT_BK 64 /* keys a block */

typedef struct at_ctx {
    const em_view *q, *k, *v, *mask, *o, *dout, *lse, *out, *dq, *dk, *dv;
    int64_t L, S, E, Ev, nb;
    bool causal;
    double scale, dropout_p, keep_p;
    uint64_t seed;
    atomic_int nomem;
} at_ctx;

static inline double at_ld(const void *buf, em_dtype dt, int64_t off) {
    switch (dt) {
    case EM_F32: return ((const float *)buf)[off];
    case EM_F64: return ((const double *)buf)[off];
    case EM_F16: return em_f16_to_f32(((const uint16_t *)buf)[off]);
    case EM_BF16: return em_bf16_to_f32(((const uint16_t *)buf)[off]);
    case EM_BOOL: case EM_U8: return ((const uint8_t *)buf)[off];
    default: return 0;
    }
}

/* lse is contiguous f32 or f64 */
static inline void at_st(const em_view *lse, int64_t i, double x) {
    if (lse->dtype == EM_F64) ((double *)lse->buf)[lse->offset + i] = x;
    else ((float *)lse->buf)[lse->offset + i] = (float)x;
}

/* The element offset of batch b's [0, 0] (batch dims 0..rank-2). */
static int64_t at_base(const em_view *v, int64_t b) {
    int64_t off = v->offset;
    for (int d = v->rank - 3; d >= 0; d--) {
        const int64_t n = v->shape[d];
        off += (b % n) * v->strides[d];
        b /= n;
    }
    return off;
}

/* Philox-4x32-10 bernoulli(keep_p) at element n: random.c's mapping (counter (n/4, 2, 0),
 * word n % 4, 24-bit fraction < keep_p). */
static bool at_keep(uint64_t seed, uint64_t n, double keep_p) {
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
    const uint32_t w = (n % 4 == 0) ? c0 : (n % 4 == 1) ? c1 : (n % 4 == 2) ? c2 : c3;
    return (double)(w >> 8) * (1.0 / 16777216.0) < keep_p;
}

#define AT_T float
#define AT_S f32
#define AT_DT EM_F32
#define AT_IS_F32 1
#include "attention_body.h"
#undef AT_T
#undef AT_S
#undef AT_DT
#undef AT_IS_F32
#define AT_T double
#define AT_S f64
#define AT_DT EM_F64
#define AT_IS_F32 0
#include "attention_body.h"
#undef AT_T
#undef AT_S
#undef AT_DT
#undef AT_IS_F32

static bool at_is_float(em_dtype dt) {
    return dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16;
}

static bool at_setup(at_ctx *c, const em_view *q, const em_view *k, const em_view *v,
                     const em_view *mask, bool causal, double scale, double dropout_p,
                     uint64_t seed) {
    const int R = q->rank;
    const em_dtype dt = q->dtype;
    if (!at_is_float(dt) || k->dtype != dt || v->dtype != dt || R < 2 || k->rank != R ||
        v->rank != R)
        return false;
    if (mask && (mask->rank != R || (mask->dtype != EM_BOOL && !at_is_float(mask->dtype))))
        return false;
    c->q = q, c->k = k, c->v = v, c->mask = mask;
    c->L = q->shape[R - 2], c->S = k->shape[R - 2], c->E = q->shape[R - 1];
    c->Ev = v->shape[R - 1];
    c->nb = 1;
    for (int d = 0; d < R - 2; d++) c->nb *= q->shape[d];
    c->causal = causal, c->scale = scale, c->dropout_p = dropout_p;
    c->keep_p = 1.0 - dropout_p, c->seed = seed;
    atomic_init(&c->nomem, 0);
    return true;
}

em_status CPU_K(cpu_sdpa)(void *ctx, const em_view *out, const em_view *lse, const em_view *q,
                          const em_view *k, const em_view *v, const em_view *mask, bool causal,
                          double scale, double dropout_p, uint64_t seed) {
    at_ctx c = {0};
    if (!at_setup(&c, q, k, v, mask, causal, scale, dropout_p, seed) || out->dtype != q->dtype ||
        !cpu_contiguous(out) || !cpu_contiguous(lse) ||
        lse->dtype != (q->dtype == EM_F64 ? EM_F64 : EM_F32))
        return CPU_FALLBACK(CPU_FB_SDPA, q->dtype, sdpa, ctx, out, lse, q, k, v, mask, causal,
                            scale, dropout_p, seed);
    c.out = out, c.lse = lse;
    const int64_t nqb = (c.L + AT_BQ - 1) / AT_BQ, tasks = c.nb * nqb;
    if (tasks == 0 || c.S == 0) return EM_OK;
    if (q->dtype == EM_F64) cpu_parallel_for(tasks, 1, at_fwd_range_f64, &c);
    else cpu_parallel_for(tasks, 1, at_fwd_range_f32, &c);
    if (atomic_load(&c.nomem))
        return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory (sdpa scratch)");
    return EM_OK;
}

em_status CPU_K(cpu_sdpa_backward)(void *ctx, const em_view *dq, const em_view *dk,
                                   const em_view *dv, const em_view *q, const em_view *k,
                                   const em_view *v, const em_view *mask, const em_view *out,
                                   const em_view *dout, const em_view *lse, bool causal,
                                   double scale, double dropout_p, uint64_t seed) {
    at_ctx c = {0};
    const em_dtype dt = q->dtype;
    if (!at_setup(&c, q, k, v, mask, causal, scale, dropout_p, seed) || out->dtype != dt ||
        dout->dtype != dt || out->rank != q->rank || dout->rank != q->rank || dq->dtype != dt ||
        dk->dtype != dt || dv->dtype != dt || !cpu_contiguous(dq) || !cpu_contiguous(dk) ||
        !cpu_contiguous(dv) || !cpu_contiguous(lse) ||
        lse->dtype != (dt == EM_F64 ? EM_F64 : EM_F32))
        return CPU_FALLBACK(CPU_FB_SDPA_BWD, dt, sdpa_backward, ctx, dq, dk, dv, q, k, v, mask,
                            out, dout, lse, causal, scale, dropout_p, seed);
    c.o = out, c.dout = dout, c.lse = lse, c.dq = dq, c.dk = dk, c.dv = dv;
    if (c.nb == 0 || c.L == 0 || c.S == 0) return EM_OK;
    if (dt == EM_F64) cpu_parallel_for(c.nb, 1, at_bwd_range_f64, &c);
    else cpu_parallel_for(c.nb, 1, at_bwd_range_f32, &c);
    if (atomic_load(&c.nomem))
        return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory (sdpa scratch)");
    return EM_OK;
}
