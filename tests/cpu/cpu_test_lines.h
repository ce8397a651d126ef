/*
 * cpu_test_lines.h — the harness of the cpu tests that run a kernel along lines of a tensor
 * against ref's on the same views (test_cpu_reduce.c, test_cpu_cumulative.c): a random stream,
 * element offsets of a view, the input layouts (dense, transposed, reversed, channels-last,
 * sliced, broadcast, flipped), outputs dense or transposed with gaps, an element-by-element
 * comparison and the list of instruction-set levels this build and CPU have. Include after
 * <cmocka.h>, backend.h, isa.h and cpu_test_util.h; define CT_SEED first for another stream.
 */
#ifndef EMBER_CPU_TEST_LINES_H
#define EMBER_CPU_TEST_LINES_H

#ifndef CT_SEED
#define CT_SEED 0x9e3779b97f4a7c15ull
#endif
static uint64_t rng = CT_SEED;
static inline double urand(void) { /* [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static inline size_t esz(em_dtype dt) { return em_dtype_size(dt); }

static inline int64_t numel(const em_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= v->shape[d];
    return n;
}

/** Element offset of the i-th element (row-major order) of v. */
static inline int64_t off_of(const em_view *v, int64_t i) {
    int64_t o = v->offset;
    for (int d = v->rank - 1; d >= 0; d--) {
        o += (i % v->shape[d]) * v->strides[d];
        i /= v->shape[d];
    }
    return o;
}

/* ---- input layouts ---- */

enum { L_DENSE, L_T_LAST, L_REVERSE, L_NHWC, L_SLICE, L_BCAST, L_FLIP, L_FLIP0, L_COUNT };
static const char *LNAMES[] = {"dense", "transpose", "reverse", "nhwc",
                               "slice", "bcast", "flip",    "flip0"};

/** A view of `shape` with layout lay (no buffer yet): *total is the number of elements its
 *  buffer needs. */
static inline em_view lines_view(em_dtype dt, int rank, const int64_t *shape, int lay,
                                 int64_t *total) {
    em_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.rank = rank;
    for (int d = 0; d < rank; d++) v.shape[d] = shape[d];
    int perm[EM_MAX_RANK];
    for (int d = 0; d < rank; d++) perm[d] = d;
    if (lay == L_T_LAST && rank >= 2) perm[rank - 1] = rank - 2, perm[rank - 2] = rank - 1;
    if (lay == L_REVERSE)
        for (int d = 0; d < rank; d++) perm[d] = rank - 1 - d;
    if (lay == L_NHWC && rank == 4) perm[0] = 0, perm[1] = 3, perm[2] = 1, perm[3] = 2;
    /* storage position k holds view dim perm[k] (k = rank - 1 innermost); a slice steps by 2
     * through its innermost storage dim */
    int64_t st[EM_MAX_RANK], s = 1;
    for (int k = rank - 1; k >= 0; k--) {
        int d = perm[k];
        int64_t mult = lay == L_SLICE && k == rank - 1 ? 2 : 1;
        st[d] = s * mult;
        s *= (shape[d] > 0 ? shape[d] : 1) * mult;
    }
    *total = s + 8; /* room for the slice's offset */
    for (int d = 0; d < rank; d++) v.strides[d] = st[d];
    if (lay == L_SLICE) v.offset = 3;
    if (lay == L_BCAST && rank >= 1) v.strides[rank > 1 ? 1 : 0] = 0;
    if ((lay == L_FLIP || lay == L_FLIP0) && rank >= 1) {
        int d = lay == L_FLIP ? rank - 1 : 0;
        v.offset += (shape[d] > 0 ? shape[d] - 1 : 0) * v.strides[d];
        v.strides[d] = -v.strides[d];
    }
    return v;
}

/** Same shape as in, dense, or with the last two dims transposed in storage plus gaps, over
 *  a fresh zeroed buffer (*buf, to free). */
static inline em_view make_same(em_dtype dt, const em_view *in, bool strided, void **buf) {
    em_view v = ct_dense(NULL, dt, in->rank, in->shape);
    int64_t n = numel(in);
    if (strided && in->rank >= 2) {
        int r = in->rank;
        int64_t s = 1;
        int order[EM_MAX_RANK];
        for (int d = 0; d < r; d++) order[d] = d;
        order[r - 1] = r - 2, order[r - 2] = r - 1;
        for (int k = r - 1; k >= 0; k--) {
            v.strides[order[k]] = s * (k == r - 1 ? 3 : 1);
            s *= in->shape[order[k]] * (k == r - 1 ? 3 : 1);
        }
        n = s;
        v.offset = 2;
    }
    *buf = calloc((size_t)(n + 16), esz(dt));
    v.buf = *buf;
    return v;
}

static int fails = 0;

/** a and b agree element for element: NaN where the other is NaN, else
 *  |a - b| <= tol (floor + |b|) (floor 0: relative, 1: also absolute near 0). */
static inline void compare(const char *what, const em_view *a, const em_view *b, double tol,
                           double floor) {
    int64_t n = numel(a);
    for (int64_t i = 0; i < n; i++) {
        double x = ct_load(a->buf, a->dtype, off_of(a, i));
        double y = ct_load(b->buf, b->dtype, off_of(b, i));
        bool ok = (x != x && y != y) || x == y || fabs(x - y) <= tol * (floor + fabs(y));
        if (!ok) {
            if (fails++ < 20)
                print_error("%s: element %lld: cpu %.9g, ref %.9g\n", what, (long long)i, x, y);
            return;
        }
    }
}

static const cpu_kernels *levels[CPU_ISA_COUNT];
static int nlevels;
static const em_backend_ops *ref;

static inline void setup_levels(void) {
    ref = em_backend_get(EM_BACKEND_REF);
    assert_non_null(ref);
    nlevels = 0;
    for (int l = 0; l <= cpu_isa_best(); l++)
        if (cpu_kernels_of(l)) levels[nlevels++] = cpu_kernels_of(l);
    assert_true(nlevels >= 1);
}

#endif
