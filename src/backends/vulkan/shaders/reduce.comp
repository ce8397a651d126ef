/*
 * reduce.comp — reductions (sum mean prod max min argmax argmin var logsumexp), cumsum,
 * cumprod / cummax / cummin and softmax / log-softmax, ported from opencl's reduce.cl.
 *
 * One kernel per variant, chosen by a define (reduce.list): K_REDUCE, K_CUMSUM, K_CUMPROD,
 * K_CUMEXT (cummax / cummin), K_SOFTMAX. A is the input's tag, O the output's; OUT64 marks the
 * variants whose output is i64 (int sums and products, argmax / argmin, int cumsum/cumprod).
 *
 * Every kernel works on "lines": line g is n elements of the input at vidx(1, g) + j * stride
 * (P.v[1] is the input with the reduced dim's extent set to 1, so its element g is line g's
 * head), or for a whole reduction that does not chain into one stride, vidx(2, j). The output
 * of line g is at vidx(0, g) (reduce: the keepdim output itself; the along-dim kernels: the
 * output's heads, step ostride).
 *
 * Two modes (P.i[5], uniform): serial, each invocation takes whole lines (a grid-stride loop:
 * many short lines), or group, one workgroup a line (g = workgroup id, looping past 65,535),
 * the invocations walking j = lid, lid + WG, ... and meeting in a tree in shared memory.
 *
 * Arithmetic as ref's where the device allows it: ACC is double for f64 and for the float
 * variants built with USE_F64 (reduce64.* etc., used when the device has shaderFloat64), else
 * float with Kahan-compensated sums; ints in wrapping int64 for sums and products (OUT64),
 * in CT_A for max / min. NaN propagates through max / min / logsumexp / softmax; argmax and
 * argmin take the first NaN, else the first extreme value; cummax / cummin follow PyTorch
 * (>= / <= or NaN takes over).
 *
 * Chunks: a dispatch walks only j in [J0, J1) of each line (the whole line: 0, n). Lines too
 * long for one invocation's loops (lavapipe's llvmpipe leaves any loop nest silently after
 * about 65,535 iterations) are walked by several ordered dispatches, a chunk each (CH_ON):
 * each continues from the line's state that the previous one left in st_ / sti_ (bindings 4
 * and 5, scratch: slots 2g and 2g + 1 of st_, g of sti_) and stores it back; CH_FIRST marks a
 * pass's first chunk (no state yet), CH_OUT the dispatch that writes the output. Multi-pass
 * ops run their passes (PASS) in turn, each over every chunk: var (sums, then squared
 * deviations from the mean), logsumexp (max, then sum of exp), softmax (max, sum of exp,
 * write). In chunks, the reductions, softmax and cumsum run in group mode; cumprod and
 * cummax / cummin stay one invocation a line.
 *
 * Parameters: P.i[0] op, [1] n, [2] the input's stride along the line, [3] lines, [4] whole,
 * [5] group mode, [6] the output's stride along the line, [7] the indices' stride (K_CUMEXT),
 * [8] log (K_SOFTMAX), [9] J0, [10] J1, [11] chunk flags (1 CH_ON, 2 CH_FIRST, 4 CH_OUT),
 * [12] PASS. var's correction: P.f[0] (PF64(0) with USE_F64).
 */
#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : enable
#include "common.glsl"
#include "math.glsl"
layout(local_size_x = WG) in;

BUF(1, O, out_);
BUF(2, A, in_);
#ifdef K_CUMEXT
BUF(3, i64, idx_);
#endif

#ifdef A_ISF
#ifdef USE_F64
#define ACC double
#else
#define ACC float
#endif
#else
#ifdef OUT64
#define ACC int64_t
#else
#define ACC CAT(CT_, A)
#endif
#endif

#define OP OP_OR(P.i[0]) /* the op the pipeline was specialized on */
#define NL (P.i[1])
#define STRIDE (P.i[2])
#define LINES (P.i[3])
#define WHOLE (P.i[4] != 0)
#define GROUP (P.i[5] != 0)
#define OSTRIDE (P.i[6])
#define J0 (P.i[9])
#define J1 (P.i[10])
#define CH_ON ((P.i[11] & 1) != 0)
#define CH_FIRST ((P.i[11] & 2) != 0)
#define CH_OUT ((P.i[11] & 4) != 0)
#define PASS (P.i[12])

/* The lines' state between the dispatches of a chunked walk (see above). */
layout(std430, binding = 4) buffer B4 { ACC st_[]; };
layout(std430, binding = 5) buffer B5 { int sti_[]; };

/* em_reduce_op */
#define R_SUM 0
#define R_MEAN 1
#define R_PROD 2
#define R_MAX 3
#define R_MIN 4
#define R_ARGMAX 5
#define R_ARGMIN 6
#define R_VAR 7
#define R_LSE 8

#define STO(o, r) out_[o] = CAT(ST_, O)(CAT(CT_, O)(r))

shared ACC lv[WG];
shared int li[WG];

/* Element j of the line with head offset base. */
int line_off(int base, int j) { return WHOLE ? vidx(2, j) : base + j * STRIDE; }
ACC loadj(int base, int j) { return ACC(CAT(LD_, A)(in_[line_off(base, j)])); }

/* This invocation's place in its line's walk: start lid, step L (serial: 0, 1). */
int lid_() { return GROUP ? int(gl_LocalInvocationID.x) : 0; }
int step_() { return GROUP ? WG : 1; }

bool acc_isnan(ACC x) {
#ifdef A_ISF
    return isnan(x);
#else
    return false;
#endif
}

/* The larger (is_max) or smaller of a and b; a NaN wins (a first). */
ACC pick(ACC a, ACC b, bool is_max) {
    if (acc_isnan(a)) return a;
    if (acc_isnan(b)) return b;
    return is_max ? (b > a ? b : a) : (b < a ? b : a);
}

/* ---- group-wide combining (group mode only; every invocation calls these) ---- */
#define GRP_TREE(x, EXPR)                                                                      \
    uint lid = gl_LocalInvocationID.x;                                                         \
    lv[lid] = x;                                                                               \
    barrier();                                                                                 \
    for (uint h = WG / 2; h > 0; h /= 2) {                                                     \
        if (lid < h) lv[lid] = EXPR;                                                           \
        barrier();                                                                             \
    }                                                                                          \
    ACC r = lv[0];                                                                             \
    barrier();                                                                                 \
    return r;

ACC grp_sum(ACC x) {
    if (!GROUP) return x;
    GRP_TREE(x, lv[lid] + lv[lid + h])
}
ACC grp_prod(ACC x) {
    if (!GROUP) return x;
    GRP_TREE(x, lv[lid] * lv[lid + h])
}
ACC grp_ext(ACC x, bool is_max) {
    if (!GROUP) return x;
    GRP_TREE(x, pick(lv[lid], lv[lid + h], is_max))
}

/* True when candidate (bv, bi) beats (av, ai) for argmax (is_max) / argmin: the first NaN,
 * else the extreme value, ties to the lower index. An index < 0 is "no candidate". */
bool arg_better(ACC av, int ai, ACC bv, int bi, bool is_max) {
    if (bi < 0) return false;
    if (ai < 0) return true;
    bool an = acc_isnan(av), bn = acc_isnan(bv);
    if (an || bn) return bn && (!an || bi < ai);
    if (bv == av) return bi < ai;
    return is_max ? bv > av : bv < av;
}

/* The winning index of the group (v: its value). */
int grp_arg(inout ACC v, int i, bool is_max) {
    if (!GROUP) return i;
    uint lid = gl_LocalInvocationID.x;
    lv[lid] = v;
    li[lid] = i;
    barrier();
    for (uint h = WG / 2; h > 0; h /= 2) {
        if (lid < h && arg_better(lv[lid], li[lid], lv[lid + h], li[lid + h], is_max)) {
            lv[lid] = lv[lid + h];
            li[lid] = li[lid + h];
        }
        barrier();
    }
    int r = li[0];
    v = lv[0];
    barrier();
    return r;
}

#ifdef A_ISF
/* This invocation's compensated sum over its elements of f(x): mode 0 x, 1 (x - c)^2,
 * 2 exp(x - c). */
ACC item_sum(int base, int n, int mode, ACC c) {
    precise ACC s = ACC(0), comp = ACC(0);
    for (int j = J0 + lid_(); j < J1; j += step_()) {
        ACC x = loadj(base, j);
        if (mode == 1) x = (x - c) * (x - c);
        else if (mode == 2) x = m_exp(x - c);
        precise ACC y = x - comp;
        precise ACC t = s + y;
        comp = (isinf(t) || isnan(t)) ? ACC(0) : (t - s) - y;
        s = t;
    }
    return s;
}
#endif

/* The max (is_max) or min over the line (NaN propagating for floats). */
ACC line_ext(int base, int n, bool is_max) {
#ifdef A_ISF
    ACC m = ACC(uintBitsToFloat(is_max ? 0xff800000u : 0x7f800000u)); /* -inf / +inf */
    for (int j = J0 + lid_(); j < J1; j += step_()) m = pick(m, loadj(base, j), is_max);
#else
    /* invocations without an element contribute a copy of element 0 (n >= 1 here) */
    ACC m = J1 > J0 ? loadj(base, J0) : ACC(0);
    for (int j = J0 + lid_(); j < J1; j += step_()) m = pick(m, loadj(base, j), is_max);
#endif
    return grp_ext(m, is_max);
}

#if defined(K_REDUCE)
void reduce_line(int g) {
    const int n = NL;
    const int base = WHOLE ? 0 : vidx(1, g);
    const int o = vidx(0, g);
    const bool first = !GROUP || gl_LocalInvocationID.x == 0u;
    const int op = OP;
    if (op == R_ARGMAX || op == R_ARGMIN) {
        const bool is_max = op == R_ARGMAX;
        ACC bv = ACC(0);
        int bi = -1;
        for (int j = J0 + lid_(); j < J1; j += step_()) {
            ACC x = loadj(base, j);
            if (arg_better(bv, bi, x, j, is_max)) {
                bv = x;
                bi = j;
            }
        }
        int r = grp_arg(bv, bi, is_max);
        if (CH_ON && first) {
            /* the state (earlier chunks: lower indices) wins unless this chunk beats it */
            if (!CH_FIRST && !arg_better(st_[2 * g], sti_[g], bv, r, is_max)) {
                bv = st_[2 * g];
                r = sti_[g];
            }
            st_[2 * g] = bv;
            sti_[g] = r;
        }
        if (first && (!CH_ON || CH_OUT)) STO(o, r < 0 ? 0 : r);
        return;
    }
    if (op == R_MAX || op == R_MIN) {
        ACC r = line_ext(base, n, op == R_MAX);
        if (CH_ON && first) {
            if (!CH_FIRST) r = pick(st_[2 * g], r, op == R_MAX);
            st_[2 * g] = r;
        }
        if (first && (!CH_ON || CH_OUT)) STO(o, r);
        return;
    }
#ifdef A_ISF
    if (op == R_PROD) {
        ACC p = ACC(1);
        for (int j = J0 + lid_(); j < J1; j += step_()) p *= loadj(base, j);
        ACC r = grp_prod(p);
        if (CH_ON && first) {
            if (!CH_FIRST) r = st_[2 * g] * r;
            st_[2 * g] = r;
        }
        if (first && (!CH_ON || CH_OUT)) STO(o, r);
        return;
    }
    if (op == R_LSE && CH_ON) {
        /* pass 0: the max; pass 1: the sum of exp(x - max), then the result */
        if (PASS == 0) {
            ACC m = line_ext(base, n, true);
            if (first) st_[2 * g] = CH_FIRST ? m : pick(st_[2 * g], m, true);
            return;
        }
        ACC m = st_[2 * g];
        ACC s = grp_sum(item_sum(base, n, 2, m));
        if (first) {
            if (!CH_FIRST) s += st_[2 * g + 1];
            st_[2 * g + 1] = s;
            if (CH_OUT) STO(o, (isnan(m) || isinf(m)) ? m : m + m_log(s));
        }
        return;
    }
    if (op == R_VAR && CH_ON) {
        /* pass 0: the sum; pass 1: the sum of squared deviations from the mean */
        if (PASS == 0) {
            ACC s = grp_sum(item_sum(base, n, 0, ACC(0)));
            if (first) st_[2 * g] = CH_FIRST ? s : st_[2 * g] + s;
            return;
        }
        ACC mean = st_[2 * g] / ACC(n);
        ACC m2 = grp_sum(item_sum(base, n, 1, mean));
        if (first) {
            if (!CH_FIRST) m2 += st_[2 * g + 1];
            st_[2 * g + 1] = m2;
#ifdef USE_F64
            ACC div = ACC(n) - ACC(PF64(0));
#else
            ACC div = ACC(n) - ACC(P.f[0]);
#endif
            if (CH_OUT) STO(o, m2 / (div > ACC(0) ? div : ACC(0)));
        }
        return;
    }
    if (op == R_LSE) {
        ACC m = line_ext(base, n, true);
        ACC r;
        if (isnan(m) || isinf(m)) {
            r = m;
        } else {
            ACC s = grp_sum(item_sum(base, n, 2, m));
            r = m + m_log(s);
        }
        if (first) STO(o, r);
        return;
    }
    /* sum, mean, var */
    ACC s = grp_sum(item_sum(base, n, 0, ACC(0)));
    if (CH_ON) {
        /* sum and mean (var and logsumexp in chunks: above) */
        if (first) {
            if (!CH_FIRST) s += st_[2 * g];
            st_[2 * g] = s;
            if (CH_OUT) STO(o, op == R_MEAN ? s / ACC(n) : s);
        }
        return;
    }
    ACC r = s;
    if (op == R_MEAN) r = s / ACC(n);
    if (op == R_VAR) {
        ACC mean = s / ACC(n);
        ACC m2 = grp_sum(item_sum(base, n, 1, mean));
#ifdef USE_F64
        ACC div = ACC(n) - ACC(PF64(0));
#else
        ACC div = ACC(n) - ACC(P.f[0]);
#endif
        r = m2 / (div > ACC(0) ? div : ACC(0));
    }
    if (first) STO(o, r);
#else
    /* int sum / prod: wrapping int64 (ACC is int64_t in the OUT64 variants) */
    ACC acc = op == R_PROD ? ACC(1) : ACC(0);
    for (int j = J0 + lid_(); j < J1; j += step_()) {
        ACC x = loadj(base, j);
        acc = op == R_PROD ? acc * x : acc + x;
    }
    ACC r = op == R_PROD ? grp_prod(acc) : grp_sum(acc);
    if (CH_ON && first) {
        if (!CH_FIRST) r = op == R_PROD ? st_[2 * g] * r : st_[2 * g] + r;
        st_[2 * g] = r;
    }
    if (first && (!CH_ON || CH_OUT)) STO(o, r);
#endif
}

void main() {
    if (GROUP) {
        for (int g = int(gl_WorkGroupID.x); g < LINES; g += int(gl_NumWorkGroups.x)) reduce_line(g);
    } else {
        GRID_LOOP(g, LINES) reduce_line(g);
    }
}

#elif defined(K_SOFTMAX)
void softmax_line(int g) {
    const int n = NL;
    const int base = vidx(1, g), obase = vidx(0, g);
    ACC m, s;
    if (CH_ON) {
        /* chunks: pass 0 the max, 1 the sum of exp, 2 the writes (group mode) */
        const bool first = gl_LocalInvocationID.x == 0u;
        if (PASS == 0) {
            m = line_ext(base, n, true);
            if (first) st_[2 * g] = CH_FIRST ? m : pick(st_[2 * g], m, true);
            return;
        }
        m = st_[2 * g];
        if (PASS == 1) {
            s = grp_sum(item_sum(base, n, 2, m));
            if (first) st_[2 * g + 1] = CH_FIRST ? s : st_[2 * g + 1] + s;
            return;
        }
        s = st_[2 * g + 1];
    } else {
        m = line_ext(base, n, true);
        s = grp_sum(item_sum(base, n, 2, m));
    }
    ACC ls = m_log(s);
    const bool logm = P.i[8] != 0;
    for (int j = J0 + lid_(); j < J1; j += step_()) {
        ACC d = loadj(base, j) - m;
        STO(obase + j * OSTRIDE, logm ? d - ls : m_exp(d) / s);
    }
}

void main() {
    if (GROUP) {
        for (int g = int(gl_WorkGroupID.x); g < LINES; g += int(gl_NumWorkGroups.x)) softmax_line(g);
    } else {
        GRID_LOOP(g, LINES) softmax_line(g);
    }
}

#elif defined(K_CUMSUM)
/* Serial: one invocation scans the line. Group: invocation t scans the chunk [t*C, (t+1)*C)
 * (C = ceil(n / WG)): chunk totals, an inclusive scan of them in shared memory, then a second
 * pass writing the running sums from the chunk's prefix. */
void cumsum_line(int g) {
    const int n = NL;
    const int base = vidx(1, g), obase = vidx(0, g);
    int j0 = J0, j1 = J1;
    /* chunks (group mode): the running sum of the earlier chunks */
    const ACC carry = CH_ON && !CH_FIRST ? st_[g] : ACC(0);
    ACC pre = carry, tot = ACC(0);
    if (GROUP) {
        const int C = (J1 - J0 + WG - 1) / WG;
        const int t = int(gl_LocalInvocationID.x);
        j0 = min(J1, J0 + t * C);
        j1 = min(J1, j0 + C);
#ifdef A_ISF
        precise ACC s = ACC(0), comp = ACC(0);
        for (int j = j0; j < j1; j++) {
            precise ACC y = loadj(base, j) - comp;
            precise ACC u = s + y;
            comp = (isinf(u) || isnan(u)) ? ACC(0) : (u - s) - y;
            s = u;
        }
#else
        ACC s = ACC(0);
        for (int j = j0; j < j1; j++) s += loadj(base, j);
#endif
        lv[t] = s;
        barrier();
        for (int h = 1; h < WG; h *= 2) {
            ACC add = t >= h ? lv[t - h] : ACC(0);
            barrier();
            lv[t] = lv[t] + add;
            barrier();
        }
        pre = carry + (t > 0 ? lv[t - 1] : ACC(0));
        tot = lv[WG - 1];
        barrier();
        /* every invocation read st_[g] before the barriers above */
        if (CH_ON && t == 0) st_[g] = carry + tot;
    }
#ifdef A_ISF
    precise ACC r = pre, comp2 = ACC(0);
    for (int j = j0; j < j1; j++) {
        precise ACC y = loadj(base, j) - comp2;
        precise ACC u = r + y;
        comp2 = (isinf(u) || isnan(u)) ? ACC(0) : (u - r) - y;
        r = u;
        STO(obase + j * OSTRIDE, r);
    }
#else
    ACC r = pre;
    for (int j = j0; j < j1; j++) {
        r += loadj(base, j);
        STO(obase + j * OSTRIDE, r);
    }
#endif
}

void main() {
    if (GROUP) {
        for (int g = int(gl_WorkGroupID.x); g < LINES; g += int(gl_NumWorkGroups.x)) cumsum_line(g);
    } else {
        GRID_LOOP(g, LINES) cumsum_line(g);
    }
}

#elif defined(K_CUMPROD)
/* One invocation a line: the running product (floats in ACC, ints wrapping int64). */
void main() {
    GRID_LOOP(g, LINES) {
        const int base = vidx(1, g), obase = vidx(0, g);
        ACC p = CH_ON && !CH_FIRST ? st_[g] : ACC(1); /* chunks: carried over */
        for (int j = J0; j < J1; j++) {
            p *= loadj(base, j);
            STO(obase + j * OSTRIDE, p);
        }
        if (CH_ON) st_[g] = p;
    }
}

#elif defined(K_CUMEXT)
/* One invocation a line: the running max (op 1) or min (op 2) in A with its index. */
void main() {
    const bool is_max = OP == 1;
    GRID_LOOP(g, LINES) {
        const int base = vidx(1, g), obase = vidx(0, g), kbase = vidx(3, g);
        /* chunks: the running extreme and its index carried over (ACC is CT_A here) */
        CAT(CT_, A) m = CH_ON && !CH_FIRST ? CAT(CT_, A)(st_[g]) : CAT(CT_, A)(0);
        int mi = CH_ON && !CH_FIRST ? sti_[g] : 0;
        for (int j = J0; j < J1; j++) {
            CAT(CT_, A) v = CAT(LD_, A)(in_[base + j * STRIDE]);
            bool take = j == 0 || (is_max ? v >= m : v <= m);
#ifdef A_ISF
            take = take || isnan(v);
#endif
            if (take) {
                m = v;
                mi = j;
            }
            out_[obase + j * OSTRIDE] = CAT(ST_, A)(m);
            idx_[kbase + j * P.i[7]] = int64_t(mi);
        }
        if (CH_ON) {
            st_[g] = ACC(m);
            sti_[g] = mi;
        }
    }
}
#endif
