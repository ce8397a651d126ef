/*
 * index.comp — gather / index_select, scatter_add and a stable sort (the semantics of
 * src/backends/ref/index.c, ported from src/backends/opencl/index.cl). One kernel per variant
 * (index.list):
 *   K_GATHER (W: a raw-word tag)        out[c] = in[c with dim replaced by index[c]], one
 *                                       invocation per out element, elements moved bit for bit
 *   K_SCATTER_LINES (A: the dtype)      one invocation per index line: adds in order along dim
 *   K_SCATTER_ELEMS (A)                 one invocation per out element, scanning its line
 *   K_SORT_INIT (A)                     keys (CT of A) and positions of every line
 *   K_SORT_MERGE (A: f32 f64 i32 i64)   one bottom-up merge pass (runs of w into 2w)
 *   K_SORT_OUT (W)                      values (raw words) and indices (i64 as uvec2 words)
 * Index buffers are bound as 32-bit words: an i64 index (P.i[0] = 1) is read by its low word
 * (the core has range-checked the values), so no variant needs shaderInt64 for indices.
 * Scatter rounds to the dtype after every add (as ref does), ints wrap, bool ORs; each out
 * element is written by one invocation only (deterministic, no atomics). A long index line is
 * split over several dispatches (P.i[3], P.i[4]: the range of j), each continuing from the
 * values the previous one stored: lavapipe ends a loop nest silently past 65,535 iterations.
 */
#version 450
#include "common.glsl"
layout(local_size_x = WG) in;

/* The key tag of a dtype tag: floats compare as float (f64 as double), ints as int / int64. */
#define KEY_f32 f32
#define KEY_f16 f32
#define KEY_bf16 f32
#define KEY_f64 f64
#define KEY_i64 i64
#define KEY_i32 i32
#define KEY_i16 i32
#define KEY_i8 i32
#define KEY_u8 i32
#define KEY_b8 i32

#if defined(K_GATHER) || defined(K_SCATTER_LINES) || defined(K_SCATTER_ELEMS)
#if defined(K_GATHER)
BUF(1, W, o_);
BUF(2, W, a_);
BUF(3, w32, x_);
#else
BUF(1, A, o_);
BUF(2, w32, x_);
BUF(3, A, s_);
#endif
/* Index element at offset o (i64: its low word). */
int ld_index(int o) { return P.i[0] != 0 ? int(x_[2 * o]) : int(x_[o]); }
#endif

#if defined(K_GATHER)
/* P.v[0] out, P.v[1] in, P.v[2] index (out's shape; index_select: strides 0 but along dim);
 * P.i[1] dim. */
void main() {
    int dim = P.i[1];
    GRID_LOOP(e, P.v[0].numel) {
        int i = e, oo = P.v[0].offset, io = P.v[1].offset, xo = P.v[2].offset;
        for (int d = P.v[0].rank - 1; d >= 0; d--) {
            int s = P.v[0].shape[d], q = i / s, c = i - q * s;
            i = q;
            oo += c * P.v[0].strides[d];
            xo += c * P.v[2].strides[d];
            if (d != dim) io += c * P.v[1].strides[d];
        }
        io += ld_index(xo) * P.v[1].strides[dim];
        o_[oo] = a_[io];
    }
}

#elif defined(K_SCATTER_LINES) || defined(K_SCATTER_ELEMS)
/* One add of src value s to accumulator acc, as ref: floats rounded to A, ints wrap (the
 * store truncates to the width), bool ORs (0/1 values: the sum is nonzero exactly when the OR
 * is 1, and the store gives sum != 0). */
CAT(CT_, A) add1(CAT(CT_, A) acc, CAT(CT_, A) s) {
#if defined(A_ISF)
    return CAT(LD_, A)(CAT(ST_, A)(acc + s));
#else
    return acc + s;
#endif
}

#if defined(K_SCATTER_LINES)
/* P.v[0] out, P.v[1] index, P.v[2] src (index's shape), P.v[3] index's heads (dim's extent
 * 1); P.i[1] dim, P.i[2] the number of lines; this dispatch adds j in [P.i[3], P.i[4]). */
void main() {
    int dim = P.i[1];
    GRID_LOOP(e, P.i[2]) {
        int i = e, oo = P.v[0].offset, xo = P.v[1].offset, so = P.v[2].offset;
        for (int d = P.v[3].rank - 1; d >= 0; d--) {
            int s = P.v[3].shape[d], q = i / s, c = i - q * s;
            i = q;
            oo += c * P.v[0].strides[d];
            xo += c * P.v[1].strides[d];
            so += c * P.v[2].strides[d];
        }
        int xs = P.v[1].strides[dim], ss = P.v[2].strides[dim];
        int os = P.v[0].strides[dim];
        for (int j = P.i[3]; j < P.i[4]; j++) {
            int o = oo + ld_index(xo + j * xs) * os;
            CAT(CT_, A) v = add1(CAT(LD_, A)(o_[o]), CAT(LD_, A)(s_[so + j * ss]));
            o_[o] = CAT(ST_, A)(v);
        }
    }
}
#else
/* P.v[0] out, P.v[1] index, P.v[2] src; P.i[1] dim. Out element c gets every src[c'] with
 * index[c'] == c[dim] (c' = c with dim replaced by j), in increasing j; this dispatch scans
 * j in [P.i[3], P.i[4]). */
void main() {
    int dim = P.i[1];
    GRID_LOOP(e, P.v[0].numel) {
        int i = e, oo = P.v[0].offset, xo = P.v[1].offset, so = P.v[2].offset, t = 0;
        bool inside = true;
        for (int d = P.v[0].rank - 1; d >= 0; d--) {
            int s = P.v[0].shape[d], q = i / s, c = i - q * s;
            i = q;
            oo += c * P.v[0].strides[d];
            if (d == dim) {
                t = c;
            } else {
                if (c >= P.v[1].shape[d]) inside = false;
                xo += c * P.v[1].strides[d];
                so += c * P.v[2].strides[d];
            }
        }
        if (!inside) continue;
        int xs = P.v[1].strides[dim], ss = P.v[2].strides[dim];
        bool hit = false;
        CAT(CT_, A) acc = CAT(LD_, A)(o_[oo]);
        for (int j = P.i[3]; j < P.i[4]; j++) {
            if (ld_index(xo + j * xs) != t) continue;
            acc = add1(acc, CAT(LD_, A)(s_[so + j * ss]));
            hit = true;
        }
        if (hit) o_[oo] = CAT(ST_, A)(acc);
    }
}
#endif

#elif defined(K_SORT_INIT)
/* P.v[0] in's heads (dim's extent 1); P.i[0] in's stride along dim, P.i[1] n (line length),
 * P.i[2] total. keys[l * n + j] = line l's element j, pos = j. */
BUF(1, A, a_);
BUF(2, CAT(KEY_, A), k_);
BUF(3, w32, p_);
void main() {
    int n = P.i[1];
    GRID_LOOP(e, P.i[2]) {
        int l = e / n, j = e - l * n;
        k_[e] = CAT(LD_, A)(a_[vidx(0, l) + j * P.i[0]]);
        p_[e] = uint(j);
    }
}

#elif defined(K_SORT_MERGE)
/* P.i[1] n, P.i[2] total, P.i[3] w (the run width), P.i[4] descending. An element's new place
 * is its place in its run plus the count of the partner run's elements that go before it:
 * for the left run those strictly before it, for the right run those not after it (stable).
 * NaN is the largest value: last ascending, first descending. */
BUF(1, A, k_);
BUF(2, w32, p_);
BUF(3, A, k2_);
BUF(4, w32, p2_);
bool key_before(CAT(CT_, A) x, CAT(CT_, A) y, bool desc) {
#if defined(A_ISF)
    bool nx = isnan(x), ny = isnan(y);
    if (desc) return (nx && !ny) || x > y;
    return (!nx && ny) || x < y;
#else
    return desc ? x > y : x < y;
#endif
}
void main() {
    int n = P.i[1], w = P.i[3];
    bool desc = P.i[4] != 0;
    GRID_LOOP(e, P.i[2]) {
        int l = e / n, p = e - l * n, ln = l * n;
        int r = p / w, base = (r & ~1) * w;
        int mid = min(base + w, n), end = min(base + 2 * w, n);
        CAT(CT_, A) k = k_[e];
        int lo, hi, dst;
        if ((r & 1) == 0) {
            lo = mid;
            hi = end;
            while (lo < hi) {
                int m = (lo + hi) >> 1;
                if (key_before(k_[ln + m], k, desc)) lo = m + 1;
                else hi = m;
            }
            dst = p + (lo - mid);
        } else {
            lo = base;
            hi = mid;
            while (lo < hi) {
                int m = (lo + hi) >> 1;
                if (!key_before(k, k_[ln + m], desc)) lo = m + 1;
                else hi = m;
            }
            dst = base + (p - mid) + (lo - base);
        }
        k2_[ln + dst] = k;
        p2_[ln + dst] = p_[e];
    }
}

#elif defined(K_SORT_OUT)
/* P.v[0] in's heads, P.v[1] values' heads, P.v[2] indices' heads; P.i[0] in's stride along
 * dim, P.i[1] n, P.i[2] total, P.i[3] values' stride, P.i[4] indices' stride, P.i[5] has
 * values, P.i[6] has indices. */
BUF(1, W, a_);
BUF(2, w32, p_);
BUF(3, W, v_);
BUF(4, w64, x_);
void main() {
    int n = P.i[1];
    GRID_LOOP(e, P.i[2]) {
        int l = e / n, j = e - l * n, p = int(p_[e]);
        if (P.i[5] != 0) v_[vidx(1, l) + j * P.i[3]] = a_[vidx(0, l) + p * P.i[0]];
        if (P.i[6] != 0) x_[vidx(2, l) + j * P.i[4]] = uvec2(uint(p), 0u);
    }
}
#endif
