/* test_dist — libember-dist's collectives under mpirun (2 or 3 ranks): every collective x
 * every dtype x the devices ref, cpu (and opencl when present), blocking and non-blocking,
 * against references computed from every rank's known inputs; views, autodiff devices,
 * em_dist_from_comm; the argument errors. */
#include <math.h>

#include "dist_test.h"

static const em_dtype DTYPES[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64,
                                  EM_I32, EM_I16, EM_I8,  EM_U8,   EM_BOOL};
#define NDT (int)(sizeof DTYPES / sizeof DTYPES[0])

static int R, N; /* rank, size */

/* Rank r's input element i, exact in every dtype and every sum over 3 ranks. */
static double input(em_dtype dt, int r, int64_t i) {
    switch (em_dtype_kind(dt)) {
    case EM_KIND_FLOAT: return (double)((i * 7 + r * 3) % 11 - 5) * 0.25;
    case EM_KIND_BOOL: return (double)((i + r) % 3 == 0);
    default: return dt == EM_U8 ? (double)((i * 5 + r * 3) % 50) : (double)((i * 7 + r * 3) % 11 - 5);
    }
}

static void put(em_dtype dt, void *p, int64_t i, double v) {
    switch (dt) {
    case EM_F32: ((float *)p)[i] = (float)v; break;
    case EM_F64: ((double *)p)[i] = v; break;
    case EM_F16: ((uint16_t *)p)[i] = em_f32_to_f16((float)v); break;
    case EM_BF16: ((uint16_t *)p)[i] = em_f32_to_bf16((float)v); break;
    case EM_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case EM_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case EM_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case EM_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case EM_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case EM_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

static double get(em_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case EM_F32: return ((const float *)p)[i];
    case EM_F64: return ((const double *)p)[i];
    case EM_F16: return em_f16_to_f32(((const uint16_t *)p)[i]);
    case EM_BF16: return em_bf16_to_f32(((const uint16_t *)p)[i]);
    case EM_I64: return (double)((const int64_t *)p)[i];
    case EM_I32: return ((const int32_t *)p)[i];
    case EM_I16: return ((const int16_t *)p)[i];
    case EM_I8: return ((const int8_t *)p)[i];
    case EM_U8:
    case EM_BOOL: return ((const uint8_t *)p)[i];
    default: return NAN;
    }
}

/* The reduction over the ranks of element i, as the dtype holds it. */
static double reduced(em_dtype dt, em_dist_op op, int64_t i) {
    double acc = input(dt, 0, i);
    for (int r = 1; r < N; r++) {
        double v = input(dt, r, i);
        if (dt == EM_BOOL) acc = op == EM_DIST_MIN ? (acc && v) : (acc || v);
        else if (op == EM_DIST_MAX) acc = v > acc ? v : acc;
        else if (op == EM_DIST_MIN) acc = v < acc ? v : acc;
        else acc += v;
    }
    if (op != EM_DIST_MEAN) return acc;
    switch (dt) { /* the sum (exact) in the dtype, divided by N there: one rounding */
    case EM_F32: return (float)acc / (float)N;
    case EM_F64: return acc / N;
    case EM_F16: return em_f16_to_f32(em_f32_to_f16((float)acc / (float)N));
    case EM_BF16: return em_bf16_to_f32(em_f32_to_bf16((float)acc / (float)N));
    default: return NAN;
    }
}

static em_tensor *make(em_dtype dt, const int64_t *shape, int rank, em_device dev, int r) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    void *buf = malloc((size_t)(n ? n : 1) * 8);
    for (int64_t i = 0; i < n; i++) put(dt, buf, i, input(dt, r, i));
    em_tensor *t = NULL;
    OK(em_tensor_from_data(buf, dt, shape, rank, dev, &t));
    free(buf);
    return t;
}

/* t's values against expect(i) */
static void expect_values(const char *what, const em_tensor *t, double (*expect)(em_dtype, int64_t, void *),
                          void *ctx) {
    em_dtype dt = em_tensor_dtype(t);
    int64_t n = em_tensor_numel(t);
    void *buf = malloc((size_t)(n ? n : 1) * 8);
    OK(em_tensor_to_data(t, buf, (size_t)n * em_dtype_size(dt)));
    for (int64_t i = 0; i < n; i++) {
        double want = expect(dt, i, ctx), got = get(dt, buf, i);
        CHECK(got == want || (isnan(got) && isnan(want)), "%s %s: element %lld is %g, expected %g",
              what, em_dtype_name(dt), (long long)i, got, want);
    }
    free(buf);
}

static double exp_reduced(em_dtype dt, int64_t i, void *ctx) {
    return reduced(dt, *(em_dist_op *)ctx, i);
}
static double exp_root(em_dtype dt, int64_t i, void *ctx) { return input(dt, *(int *)ctx, i); }
static double exp_gather(em_dtype dt, int64_t i, void *ctx) {
    int64_t block = *(int64_t *)ctx; /* elements per rank */
    return input(dt, (int)(i / block), i % block);
}
static double exp_scatter(em_dtype dt, int64_t i, void *ctx) {
    const int64_t *c = ctx; /* block, op */
    return reduced(dt, (em_dist_op)c[1], R * c[0] + i);
}

static const char *OPNAME[] = {"sum", "mean", "max", "min"};

static void test_collectives(em_dist *d, em_device dev, const char *devname) {
    const int64_t shape[2] = {5, 3};
    for (int k = 0; k < NDT; k++) {
        em_dtype dt = DTYPES[k];
        bool fl = em_dtype_kind(dt) == EM_KIND_FLOAT;
        char what[96];
        /* all_reduce: every op, a [5, 3] and a 0-d tensor, blocking and non-blocking */
        for (int op = EM_DIST_SUM; op <= EM_DIST_MIN; op++) {
            snprintf(what, sizeof what, "%s all_reduce %s", devname, OPNAME[op]);
            em_tensor *t = make(dt, shape, 2, dev, R), *z = make(dt, NULL, 0, dev, R);
            if (op == EM_DIST_MEAN && !fl) {
                FAILS(em_all_reduce(d, t, (em_dist_op)op), EM_ERR_DTYPE);
            } else {
                em_dist_op o = (em_dist_op)op;
                OK(em_all_reduce(d, t, o));
                expect_values(what, t, exp_reduced, &o);
                em_dist_work *w = NULL;
                OK(em_all_reduce_start(d, z, o, &w));
                OK(em_dist_wait(w));
                expect_values(what, z, exp_reduced, &o);
            }
            em_tensor_release(t);
            em_tensor_release(z);
        }
        /* broadcast from the last rank, blocking and non-blocking */
        for (int nb = 0; nb < 2; nb++) {
            int root = nb ? 0 : N - 1;
            snprintf(what, sizeof what, "%s broadcast root %d", devname, root);
            em_tensor *t = make(dt, shape, 2, dev, R);
            if (nb) {
                em_dist_work *w = NULL;
                OK(em_broadcast_start(d, t, root, &w));
                OK(em_dist_wait(w));
            } else {
                OK(em_broadcast(d, t, root));
            }
            expect_values(what, t, exp_root, &root);
            em_tensor_release(t);
        }
        /* all_gather of [2, 3] and of a 0-d tensor */
        {
            const int64_t gs[2] = {2, 3};
            em_tensor *t = make(dt, gs, 2, dev, R), *o = NULL;
            OK(em_all_gather(d, t, &o));
            CHECK(em_tensor_rank(o) == 2 && em_tensor_shape(o)[0] == 2 * N &&
                  em_tensor_shape(o)[1] == 3, "all_gather's shape");
            CHECK(em_device_equal(em_tensor_device(o), dev), "all_gather's device");
            int64_t block = 6;
            snprintf(what, sizeof what, "%s all_gather", devname);
            expect_values(what, o, exp_gather, &block);
            em_tensor_release(o);
            em_tensor_release(t);
            t = make(dt, NULL, 0, dev, R);
            OK(em_all_gather(d, t, &o));
            CHECK(em_tensor_rank(o) == 1 && em_tensor_shape(o)[0] == N, "0-d all_gather's shape");
            block = 1;
            expect_values(what, o, exp_gather, &block);
            em_tensor_release(o);
            em_tensor_release(t);
        }
        /* reduce_scatter of [2N, 3]: every op */
        for (int op = EM_DIST_SUM; op <= EM_DIST_MIN; op++) {
            const int64_t rs[2] = {2 * N, 3};
            em_tensor *t = make(dt, rs, 2, dev, R), *o = NULL;
            if (op == EM_DIST_MEAN && !fl) {
                FAILS(em_reduce_scatter(d, t, (em_dist_op)op, &o), EM_ERR_DTYPE);
            } else {
                OK(em_reduce_scatter(d, t, (em_dist_op)op, &o));
                CHECK(em_tensor_rank(o) == 2 && em_tensor_shape(o)[0] == 2 &&
                      em_tensor_shape(o)[1] == 3, "reduce_scatter's shape");
                int64_t ctx[2] = {6, op};
                snprintf(what, sizeof what, "%s reduce_scatter %s", devname, OPNAME[op]);
                expect_values(what, o, exp_scatter, ctx);
                em_tensor_release(o);
            }
            em_tensor_release(t);
        }
    }
    OK(em_barrier(d));
}

/* A strided view is reduced through a copy; its base sees the values. */
static void test_views(em_dist *d, em_device dev) {
    const int64_t shape[2] = {4, 3};
    em_tensor *base = make(EM_F32, shape, 2, dev, R), *v = NULL;
    OK(em_transpose(base, 0, 1, &v)); /* [3, 4], not contiguous */
    CHECK(!em_tensor_is_contiguous(v), "the transpose is a view");
    OK(em_all_reduce(d, v, EM_DIST_SUM));
    em_dist_op o = EM_DIST_SUM;
    expect_values("view all_reduce (base)", base, exp_reduced, &o);
    em_tensor_release(v);
    /* a contiguous slice (rows 1..3) is reduced in place; rows 0 and 3 keep their values */
    em_tensor_release(base);
    base = make(EM_F32, shape, 2, dev, R);
    OK(em_slice(base, 0, 1, 3, 1, &v));
    OK(em_broadcast(d, v, N - 1));
    float got[12];
    OK(em_tensor_to_data(base, got, sizeof got));
    for (int i = 0; i < 12; i++) {
        int src = i >= 3 && i < 9 ? N - 1 : R;
        CHECK(got[i] == (float)input(EM_F32, src, i), "slice broadcast: element %d is %g", i,
              (double)got[i]);
    }
    em_tensor_release(v);
    em_tensor_release(base);
}

/* f16 / bf16 sums round once per pair: 2 ranks give exactly round(a + b). */
static void test_half_rounding(em_dist *d) {
    if (N != 2) return;
    const float a = 1.0f, b = 0x1p-11f + 0x1p-13f; /* a + b is between two f16 values */
    for (int k = 0; k < 2; k++) {
        em_dtype dt = k ? EM_BF16 : EM_F16;
        uint16_t x = k ? em_f32_to_bf16(R ? b : a) : em_f32_to_f16(R ? b : a);
        em_tensor *t = NULL;
        OK(em_tensor_from_data(&x, dt, NULL, 0, dt_host(), &t));
        OK(em_all_reduce(d, t, EM_DIST_SUM));
        uint16_t got = 0;
        OK(em_tensor_to_data(t, &got, 2));
        float xa = k ? em_bf16_to_f32(em_f32_to_bf16(a)) : em_f16_to_f32(em_f32_to_f16(a));
        float xb = k ? em_bf16_to_f32(em_f32_to_bf16(b)) : em_f16_to_f32(em_f32_to_f16(b));
        uint16_t want = k ? em_f32_to_bf16(xa + xb) : em_f32_to_f16(xa + xb);
        CHECK(got == want, "%s sum: 0x%04x, expected 0x%04x", em_dtype_name(dt), got, want);
        em_tensor_release(t);
        /* NaN is kept by max */
        x = k ? em_f32_to_bf16(R ? NAN : 1.0f) : em_f32_to_f16(R ? NAN : 1.0f);
        OK(em_tensor_from_data(&x, dt, NULL, 0, (em_device){EM_BACKEND_REF, 0, false, 0}, &t));
        OK(em_all_reduce(d, t, EM_DIST_MAX));
        OK(em_tensor_to_data(t, &got, 2));
        CHECK(isnan(k ? em_bf16_to_f32(got) : em_f16_to_f32(got)), "%s max keeps NaN",
              em_dtype_name(dt));
        em_tensor_release(t);
    }
}

/* Several collectives in flight while the rank computes; waited in order. */
static void test_overlap(em_dist *d, em_device dev) {
    const int64_t big[1] = {1 << 20}, small[2] = {5, 3};
    em_tensor *a = make(EM_F32, big, 1, dev, R), *b = make(EM_F16, small, 2, dev, R),
              *c = make(EM_I32, small, 2, dev, R), *e = make(EM_F64, small, 2, dev, R);
    em_dist_work *w[4] = {0};
    OK(em_all_reduce_start(d, a, EM_DIST_SUM, &w[0]));
    OK(em_all_reduce_start(d, b, EM_DIST_MEAN, &w[1]));
    OK(em_broadcast_start(d, c, N - 1, &w[2]));
    OK(em_all_reduce_start(d, e, EM_DIST_MAX, &w[3]));
    /* compute meanwhile */
    const int64_t ms[2] = {128, 128};
    em_tensor *m = NULL, *p = NULL;
    OK(em_ones(ms, 2, EM_F32, dev, &m));
    for (int i = 0; i < 4; i++) {
        OK(em_matmul(m, m, &p));
        em_tensor_release(p);
        for (int k = 0; k < 4; k++) (void)em_dist_test(w[k]);
    }
    em_tensor_release(m);
    for (int k = 0; k < 4; k++) OK(em_dist_wait(w[k]));
    em_dist_op sum = EM_DIST_SUM, mean = EM_DIST_MEAN, max = EM_DIST_MAX;
    int root = N - 1;
    expect_values("overlap f32 sum", a, exp_reduced, &sum);
    expect_values("overlap f16 mean", b, exp_reduced, &mean);
    expect_values("overlap i32 broadcast", c, exp_root, &root);
    expect_values("overlap f64 max", e, exp_reduced, &max);
    /* em_dist_test reports completion; the wait then returns at once */
    em_dist_work *x = NULL;
    OK(em_all_reduce_start(d, e, EM_DIST_SUM, &x));
    double t0 = dt_now();
    while (!em_dist_test(x)) CHECK(dt_now() - t0 < 30, "em_dist_test never reports completion");
    OK(em_dist_wait(x));
    em_tensor_release(a);
    em_tensor_release(b);
    em_tensor_release(c);
    em_tensor_release(e);
}

/* The argument errors: local, before any communication (the ranks stay in step). */
static void test_errors(em_dist *d) {
    em_device cpu = dt_host();
    const int64_t shape[1] = {N + 1};
    em_tensor *t = make(EM_F32, shape, 1, cpu, R), *i32 = make(EM_I32, shape, 1, cpu, R),
              *b = make(EM_BOOL, shape, 1, cpu, R), *z = make(EM_F32, NULL, 0, cpu, R);
    em_tensor *o = NULL, *q = NULL;
    em_dist_work *w = NULL;
    FAILS(em_all_reduce(NULL, t, EM_DIST_SUM), EM_ERR_ARG);
    FAILS(em_all_reduce(d, NULL, EM_DIST_SUM), EM_ERR_ARG);
    FAILS(em_all_reduce(d, t, (em_dist_op)42), EM_ERR_ARG);
    FAILS(em_all_reduce(d, i32, EM_DIST_MEAN), EM_ERR_DTYPE);
    FAILS(em_all_reduce(d, b, EM_DIST_MEAN), EM_ERR_DTYPE);
    FAILS(em_all_reduce_start(d, t, EM_DIST_SUM, NULL), EM_ERR_ARG);
    FAILS(em_all_reduce_start(NULL, t, EM_DIST_SUM, &w), EM_ERR_ARG);
    FAILS(em_broadcast(d, t, -1), EM_ERR_ARG);
    FAILS(em_broadcast(d, t, N), EM_ERR_ARG);
    FAILS(em_broadcast_start(d, t, N, &w), EM_ERR_ARG);
    FAILS(em_broadcast(d, NULL, 0), EM_ERR_ARG);
    FAILS(em_reduce_scatter(d, t, EM_DIST_SUM, &o), EM_ERR_SHAPE); /* N + 1 rows */
    FAILS(em_reduce_scatter(d, z, EM_DIST_SUM, &o), EM_ERR_SHAPE); /* 0-d */
    FAILS(em_reduce_scatter(d, t, EM_DIST_SUM, NULL), EM_ERR_ARG);
    FAILS(em_all_gather(d, t, NULL), EM_ERR_ARG);
    FAILS(em_all_gather(d, NULL, &o), EM_ERR_ARG);
    FAILS(em_barrier(NULL), EM_ERR_ARG);
    OK(em_quantize(t, EM_Q8, &q));
    FAILS(em_all_reduce(d, q, EM_DIST_SUM), EM_ERR_DTYPE);
    FAILS(em_broadcast(d, q, 0), EM_ERR_DTYPE);
    FAILS(em_all_gather(d, q, &o), EM_ERR_DTYPE);
    CHECK(o == NULL, "nothing written on failure");
    FAILS(em_dist_set_timeout(d, 0), EM_ERR_ARG);
    FAILS(em_dist_set_timeout(d, -1), EM_ERR_ARG);
    FAILS(em_dist_set_timeout(d, NAN), EM_ERR_ARG);
    FAILS(em_dist_set_timeout(NULL, 1), EM_ERR_ARG);
    FAILS(em_dist_wait(NULL), EM_ERR_ARG);
    CHECK(!em_dist_test(NULL), "em_dist_test(NULL)");
    CHECK(em_dist_rank(NULL) == 0 && em_dist_size(NULL) == 1, "rank and size of NULL");
    em_dist *x = NULL;
    FAILS(em_dist_from_comm(NULL, &x), EM_ERR_ARG);
    MPI_Comm world = MPI_COMM_WORLD;
    FAILS(em_dist_from_comm(&world, NULL), EM_ERR_ARG);
    FAILS(em_dist_init(NULL, NULL, NULL), EM_ERR_ARG);
    em_dist_free(NULL);
    em_tensor_release(q);
    em_tensor_release(t);
    em_tensor_release(i32);
    em_tensor_release(b);
    em_tensor_release(z);
    /* the ranks are still in step */
    em_tensor *s = make(EM_I64, NULL, 0, cpu, R);
    OK(em_all_reduce(d, s, EM_DIST_SUM));
    em_dist_op sum = EM_DIST_SUM;
    expect_values("after the errors", s, exp_reduced, &sum);
    em_tensor_release(s);
}

/* em_dist_from_comm on a sub-communicator: its own ranks; the caller's handler is kept. */
static void test_from_comm(void) {
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, R % 2, R, &sub);
    em_dist *d = NULL;
    OK(em_dist_from_comm(&sub, &d));
    int sr, ss;
    MPI_Comm_rank(sub, &sr);
    MPI_Comm_size(sub, &ss);
    CHECK(em_dist_rank(d) == sr && em_dist_size(d) == ss, "from_comm's rank and size");
    int64_t v = R + 1, want = 0;
    for (int r = R % 2; r < N; r += 2) want += r + 1;
    em_tensor *t = NULL;
    OK(em_tensor_from_data(&v, EM_I64, NULL, 0, (em_device){EM_BACKEND_REF, 0, false, 0}, &t));
    OK(em_all_reduce(d, t, EM_DIST_SUM));
    OK(em_tensor_to_data(t, &v, sizeof v));
    CHECK(v == want, "sub-communicator sum %lld, expected %lld", (long long)v, (long long)want);
    em_tensor_release(t);
    em_dist_free(d);
    MPI_Errhandler h;
    MPI_Comm_get_errhandler(sub, &h);
    CHECK(h == MPI_ERRORS_ARE_FATAL, "the caller's communicator keeps its error handler");
    MPI_Errhandler_free(&h);
    MPI_Comm_free(&sub);
}

int main(int argc, char **argv) {
    em_dist *d = NULL;
    em_status s = em_dist_init(&argc, &argv, &d);
    if (s != EM_OK) {
        fprintf(stderr, "em_dist_init: %s\n", em_last_error());
        return 1;
    }
    R = dt_rank = em_dist_rank(d);
    N = em_dist_size(d);
    int wr, ws;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    MPI_Comm_size(MPI_COMM_WORLD, &ws);
    CHECK(R == wr && N == ws, "rank %d / %d, MPI says %d / %d", R, N, wr, ws);
    OK(em_dist_set_timeout(d, 60)); /* a hang fails the test rather than ctest's timeout */
    const char *devs[] = {"ref", "cpu", "cpu+autodiff", "opencl"};
    for (int k = 0; k < 4; k++) {
        em_device dev;
        int have = em_device_parse(devs[k], &dev) == EM_OK, all = 0;
        em_clear_error();
        /* every rank must agree to run a device's tests */
        MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all) {
            if (R == 0) printf("test_dist: %s absent: skipped\n", devs[k]);
            continue;
        }
        double t0 = dt_now();
        test_collectives(d, dev, devs[k]);
        test_views(d, dev);
        test_overlap(d, dev);
        if (R == 0) printf("test_dist: %s: every collective x dtype passed (%.2f s)\n", devs[k],
                           dt_now() - t0);
    }
    test_half_rounding(d);
    test_errors(d);
    test_from_comm();
    OK(em_barrier(d));
    em_dist_free(d);
    if (R == 0) printf("test_dist: %d ranks: PASS (%d checks on rank 0)\n", N, dt_checks);
    return 0;
}
