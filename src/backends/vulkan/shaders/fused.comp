/*
 * fused.comp — the fused kernels of backend.h (ABI 3), one item an element (fused.c):
 *   K_UNARY_BW  gx = gy * f'(v), v the value the op reads (x or y); the op is this file's UB_
 *               code (P.i[0], mapped from em_unary_op by fused.c); clamp's bounds SC(0..1).
 *               Views: 0 gx, 1 v, 2 gy.
 *   K_ADAM      one Adam / AdamW step in place, operation by operation as backend.h's
 *               adam_step (every intermediate `precise`: no contraction into FMAs, no
 *               reassociation). Views: 0 param, 1 exp_avg, 2 exp_avg_sq, 3 grad.
 *               P.i[0]: weight_decay != 0. Scalars (grad_scale, weight_decay, beta1, c1,
 *               beta2, c2, denom_scale, denom_eps, step_scale, decay): P.f[0..9] as floats;
 *               for f64 the first 8 as P.d's doubles and the last 2 as doubles in P.i[8..11].
 * A is a float tag; arithmetic in CT_A (float for f16 / bf16 / f32, double for f64).
 */
#version 450
#include "common.glsl"
#include "math.glsl"
layout(local_size_x = WG) in;

#define ca CAT(CT_, A)
#define LDA(x) CAT(LD_, A)(x)
#define STA(v) CAT(ST_, A)(v)

#ifdef USE_F64
#define SC(k) PF64(k)
#else
#define SC(k) P.f[k]
#endif

#if defined(K_UNARY_BW)
BUF(1, A, o_);
BUF(2, A, v_);
BUF(3, A, g_);

const int UB_ABS = 0, UB_LOG = 1, UB_LOG1P = 2, UB_SIN = 3, UB_COS = 4, UB_GELU = 5,
          UB_SILU = 6, UB_ERF = 7, UB_CLAMP = 8, UB_EXP = 9, UB_SQRT = 10, UB_RSQRT = 11,
          UB_TANH = 12, UB_SIGMOID = 13, UB_RECIP = 14, UB_RELU = 15;

/* g * f'(v) (ref's src/backends/ref/fused.c); lo, hi: clamp's bounds. */
ca ub_op(int op, ca v, ca g, ca lo, ca hi) {
    const ca one = ca(1), zero = ca(0);
    switch (op) {
    case UB_ABS: return g * (v > zero ? one : v < zero ? -one : v);
    case UB_LOG: return g / v;
    case UB_LOG1P: return g / (one + v);
    case UB_SIN: return g * m_cos(v);
    case UB_COS: return g * -m_sin(v);
    case UB_GELU:
        return g * (ca(0.5) * (one + m_erf(v * ca(0.70710678118654752440LF))) +
                    v * (m_exp(ca(-0.5) * v * v) * ca(0.39894228040143267794LF)));
    case UB_SILU: {
        ca s = one / (one + m_exp(-v));
        return g * (s * (one + v * (one - s)));
    }
    case UB_ERF: return g * (m_exp(-v * v) * ca(1.12837916709551257390LF));
    case UB_CLAMP: return v >= lo && v <= hi ? g : zero;
    case UB_EXP: return g * v;
    case UB_SQRT: return g / (ca(2) * v);
    case UB_RSQRT: return g * (ca(-0.5) * v * v * v);
    case UB_TANH: return g * (one - v * v);
    case UB_SIGMOID: return g * (v * (one - v));
    case UB_RECIP: return g * -(v * v);
    case UB_RELU: return v > zero ? g : zero;
    }
    return zero;
}

void main() {
    int op = OP_OR(P.i[0]);
    ca lo = ca(SC(0)), hi = ca(SC(1));
    GRID_LOOP(i, P.v[0].numel) {
        ca r = ub_op(op, LDA(v_[vidx(1, i)]), LDA(g_[vidx(2, i)]), lo, hi);
        o_[vidx(0, i)] = STA(r);
    }
}

#elif defined(K_ADAM)
BUF(1, A, p_);
BUF(2, A, m_);
BUF(3, A, v_);
BUF(4, A, g_);

#ifdef USE_F64
#define SC9(k) PF64(k)
/* the 9th and 10th doubles: in P.i[8..11], low word first */
#define SC_HI(k) packDouble2x32(uvec2(uint(P.i[8 + 2 * (k)]), uint(P.i[9 + 2 * (k)])))
#else
#define SC9(k) P.f[k]
#define SC_HI(k) P.f[8 + (k)]
#endif

void main() {
    const ca gs = SC9(0), wd = SC9(1), b1 = SC9(2), c1 = SC9(3), b2 = SC9(4), c2 = SC9(5),
             k = SC9(6), e = SC9(7), ss = SC_HI(0), dc = SC_HI(1);
    bool has_wd = P.i[0] != 0;
    GRID_LOOP(i, P.v[0].numel) {
        int ip = vidx(0, i), im = vidx(1, i), iv = vidx(2, i);
        precise ca pi = LDA(p_[ip]);
        precise ca gi = LDA(g_[vidx(3, i)]) * gs;
        precise ca d = gi;
        if (has_wd) d = gi + pi * wd;
        precise ca mi = LDA(m_[im]) * b1 + d * c1;
        precise ca vi = LDA(v_[iv]) * b2 + (d * d) * c2;
        precise ca den = m_sqrt(vi) * k + e;
        precise ca q = (mi / den) * ss;
        precise ca np = pi * dc - q;
        m_[im] = STA(mi);
        v_[iv] = STA(vi);
        p_[ip] = STA(np);
    }
}
#endif
