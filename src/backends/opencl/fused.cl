/*
 * fused.cl — the fused kernels of backend.h (ABI 3): the input gradient of a unary op in one
 * pass, and one Adam / AdamW step in place.
 *
 * Built with -DA=<tag of a float dtype> (f32, f64, f16, bf16; common.cl provides TY_/CT_/LD_/
 * ST_, view_t, vidx). Arithmetic in CT_A (float for f16 / bf16 / f32, double for f64), as
 * elementwise.cl. The op of ew_unary_bw is this file's UB_ code (fused.c maps em_unary_op to
 * it), so that it does not depend on em_unary_op's numbering.
 */

#define FU_CAT_(a, b) a##b
#define FU_CAT(a, b) FU_CAT_(a, b)
typedef FU_CAT(TY_, A) ta;
typedef FU_CAT(CT_, A) ca;
#define LDA(p, i) FU_CAT(LD_, A)(p, i)
#define STA(p, i, v) FU_CAT(ST_, A)(p, i, v)
#define IDX(v, i) (contig ? (v).offset + (i) : vidx((v), (i)))

enum {
    UB_ABS, UB_LOG, UB_LOG1P, UB_SIN, UB_COS, UB_GELU, UB_SILU, UB_ERF, UB_CLAMP,
    UB_EXP, UB_SQRT, UB_RSQRT, UB_TANH, UB_SIGMOID, UB_RECIP, UB_RELU
};

/* g * f'(v), v the value the op reads (backend.h's unary_backward); lo, hi: clamp's bounds. */
static inline ca ub_op(int op, ca v, ca g, ca lo, ca hi) {
    const ca one = (ca)1, zero = (ca)0;
    switch (op) {
    case UB_ABS: return g * (v > zero ? one : v < zero ? -one : v);
    case UB_LOG: return g / v;
    case UB_LOG1P: return g / (one + v);
    case UB_SIN: return g * cos(v);
    case UB_COS: return g * -sin(v);
    case UB_GELU:
        return g * ((ca)0.5 * (one + erf(v * (ca)0.70710678118654752440)) +
                    v * (exp((ca)-0.5 * v * v) * (ca)0.39894228040143267794));
    case UB_SILU: {
        ca s = one / (one + exp(-v));
        return g * (s * (one + v * (one - s)));
    }
    case UB_ERF: return g * (exp(-v * v) * (ca)1.12837916709551257390);
    case UB_CLAMP: return v >= lo && v <= hi ? g : zero;
    case UB_EXP: return g * v;
    case UB_SQRT: return g / ((ca)2 * v);
    case UB_RSQRT: return g * ((ca)-0.5 * v * v * v);
    case UB_TANH: return g * (one - v * v);
    case UB_SIGMOID: return g * (v * (one - v));
    case UB_RECIP: return g * -(v * v);
    case UB_RELU: return v > zero ? g : zero;
    }
    return zero;
}

/* o = g * f'(v). */
__kernel void ew_unary_bw(__global ta *o, view_t ov, __global const ta *v, view_t vv,
                          __global const ta *g, view_t gv, long n, int contig, int op, ca p0,
                          ca p1) {
    long i = get_global_id(0);
    if (i >= n) return;
    STA(o, IDX(ov, i), ub_op(op, LDA(v, IDX(vv, i)), LDA(g, IDX(gv, i)), p0, p1));
}

#pragma OPENCL FP_CONTRACT OFF
/* One Adam / AdamW step in place (backend.h's adam_step, operation by operation). */
__kernel void ew_adam(__global ta *p, view_t pv, __global ta *m, view_t mv, __global ta *v,
                      view_t vv, __global const ta *g, view_t gv, long n, int contig, ca gs,
                      ca wd, ca b1, ca c1, ca b2, ca c2, ca k, ca e, ca ss, ca dc) {
    long i = get_global_id(0);
    if (i >= n) return;
    long ip = IDX(pv, i), im = IDX(mv, i), iv = IDX(vv, i);
    ca pi = LDA(p, ip), gi = LDA(g, IDX(gv, i)) * gs;
    ca d = wd != (ca)0 ? gi + pi * wd : gi;
    ca mi = LDA(m, im) * b1 + d * c1;
    ca vi = LDA(v, iv) * b2 + (d * d) * c2;
    ca q = (mi / (sqrt(vi) * k + e)) * ss;
    STA(m, im, mi);
    STA(v, iv, vi);
    STA(p, ip, pi * dc - q);
}
