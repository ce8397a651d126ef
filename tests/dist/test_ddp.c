/* test_ddp.c — data-parallel training (em_ddp_*, include/ember/dist.h) under mpirun -np 2 (or
 * more). A small model of mixed dtypes, different data on every rank: em_ddp_backward's
 * gradients must equal the average, computed on each rank from every rank's data (each rank
 * runs every shard's forward and backward itself), with zeros for a parameter a rank's loss
 * does not reach, and no gradient for one no rank reaches; with buckets smaller than one
 * parameter, in between, and larger than all. Also: em_ddp_create makes every replica rank
 * 0's (parameters and buffers), a step keeps them equal, the NULL arguments. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember/dist.h"
#include "ember/ember.h"
#include "ember/nn.h"

#define OK(call) assert_int_equal((call), EM_OK)

static em_dist *g_d;
static int g_rank, g_size;
static em_device g_inner, g_dev;

enum { NIN = 5, NH = 4, NOUT = 2, ROWS = 6 };

/* The model: h = tanh(x a + b) [n, NH] (f32); y = h c [n, NOUT] when `use_c` (c then reaches
 * the loss); the loss = mean(y^2) (or mean(h^2) without c) + mean((h * f32(e))^2) with e an f64
 * parameter [NH]; d [3] is a parameter no loss reaches; buf [3] a buffer. */
typedef struct toy_data {
    bool use_c;
} toy_data;

static em_status toy_forward(em_module *self, const em_tensor *x, bool training,
                             em_tensor **y) {
    (void)training;
    const toy_data *td = em_module_data(self);
    em_tensor *xa = NULL, *pre = NULL, *h = NULL, *out = NULL, *sq = NULL, *l1 = NULL;
    em_tensor *e32 = NULL, *he = NULL, *he2 = NULL, *l2 = NULL;
    em_status s = em_matmul(x, em_module_get(self, "a"), &xa);
    if (s == EM_OK) s = em_add(xa, em_module_get(self, "b"), &pre);
    if (s == EM_OK) s = em_tanh(pre, &h);
    if (s == EM_OK && td->use_c) s = em_matmul(h, em_module_get(self, "c"), &out);
    if (s == EM_OK) s = em_mul(td->use_c ? out : h, td->use_c ? out : h, &sq);
    if (s == EM_OK) s = em_mean(sq, &l1);
    if (s == EM_OK) s = em_cast(em_module_get(self, "e"), EM_F32, &e32);
    if (s == EM_OK) s = em_mul(h, e32, &he);
    if (s == EM_OK) s = em_mul(he, he, &he2);
    if (s == EM_OK) s = em_mean(he2, &l2);
    if (s == EM_OK) s = em_add(l1, l2, y);
    em_tensor_release(xa), em_tensor_release(pre), em_tensor_release(h);
    em_tensor_release(out), em_tensor_release(sq), em_tensor_release(l1);
    em_tensor_release(e32), em_tensor_release(he), em_tensor_release(he2);
    em_tensor_release(l2);
    return s;
}

static const em_module_class toy_class = {"Toy", toy_forward, NULL, free};

static double lcg(uint64_t *st) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*st >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static em_tensor *make_param(const int64_t *shape, int rank, em_dtype dt, uint64_t *st,
                             bool trained) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    double *v = malloc((size_t)n * sizeof *v);
    float *f = malloc((size_t)n * sizeof *f);
    assert_non_null(v), assert_non_null(f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)(v[i] = lcg(st));
    em_tensor *t = NULL;
    OK(em_tensor_from_data(dt == EM_F64 ? (void *)v : (void *)f, dt, shape, rank,
                           trained ? g_dev : g_inner, &t));
    if (trained) OK(em_tensor_require_grad(t));
    free(v), free(f);
    return t;
}

/* The toy model, its numbers from seed (different on every rank unless the seed is). */
static em_module *make_toy(uint64_t seed) {
    toy_data *td = calloc(1, sizeof *td);
    assert_non_null(td);
    em_module *m = NULL;
    OK(em_module_create(&toy_class, td, &m));
    uint64_t st = seed * 7919u + 1u;
    const int64_t sa[2] = {NIN, NH}, sb[1] = {NH}, sc[2] = {NH, NOUT}, sd[1] = {3};
    OK(em_module_add_param(m, "a", make_param(sa, 2, EM_F32, &st, true)));
    OK(em_module_add_param(m, "b", make_param(sb, 1, EM_F32, &st, true)));
    OK(em_module_add_param(m, "c", make_param(sc, 2, EM_F32, &st, true)));
    OK(em_module_add_param(m, "d", make_param(sd, 1, EM_F32, &st, true)));
    OK(em_module_add_param(m, "e", make_param(sb, 1, EM_F64, &st, true)));
    OK(em_module_add_buffer(m, "buf", make_param(sd, 1, EM_F32, &st, false)));
    return m;
}

/* Shard q's rows [ROWS, NIN]. */
static em_tensor *shard(int q) {
    uint64_t st = 1000u + (uint64_t)q * 31u;
    float v[ROWS * NIN];
    for (int i = 0; i < ROWS * NIN; i++) v[i] = (float)lcg(&st);
    const int64_t shape[2] = {ROWS, NIN};
    em_tensor *t = NULL;
    OK(em_tensor_from_data(v, EM_F32, shape, 2, g_inner, &t));
    return t;
}

static double *values(const em_tensor *t) {
    int64_t n = em_tensor_numel(t);
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    assert_non_null(v);
    em_tensor *c = NULL;
    OK(em_cast(t, EM_F64, &c));
    OK(em_tensor_to_data(c, v, (size_t)n * sizeof *v));
    em_tensor_release(c);
    return v;
}

/* Every rank's copy of t equals rank 0's (max and min over the ranks of each value agree). */
static void assert_same_everywhere(const em_tensor *t) {
    em_tensor *hi = NULL, *lo = NULL, *det = NULL;
    OK(em_tensor_detach(t, &det));
    OK(em_cast(det, EM_F64, &hi));
    OK(em_cast(det, EM_F64, &lo));
    OK(em_all_reduce(g_d, hi, EM_DIST_MAX));
    OK(em_all_reduce(g_d, lo, EM_DIST_MIN));
    double *a = values(hi), *b = values(lo);
    for (int64_t i = 0; i < em_tensor_numel(t); i++) assert_true(a[i] == b[i]);
    free(a), free(b);
    em_tensor_release(hi), em_tensor_release(lo), em_tensor_release(det);
}

static void test_create_broadcasts(void **state) {
    (void)state;
    em_module *m = make_toy(100u + (uint64_t)g_rank); /* different on every rank */
    em_ddp *ddp = NULL;
    OK(em_ddp_create(g_d, m, 0, &ddp));
    em_params *st = NULL;
    OK(em_params_create(&st));
    OK(em_module_state(m, NULL, st));
    for (size_t i = 0; i < em_params_count(st); i++)
        assert_same_everywhere(em_params_get(st, i));
    /* and they are rank 0's: rank 0's model is make_toy(100) */
    em_module *ref = make_toy(100u);
    for (size_t i = 0; i < em_params_count(st); i++) {
        const char *name = em_params_name(st, i);
        double *a = values(em_params_get(st, i)), *b = values(em_module_get(ref, name));
        for (int64_t k = 0; k < em_tensor_numel(em_params_get(st, i)); k++)
            assert_true(a[k] == b[k]);
        free(a), free(b);
    }
    em_params_release(st);
    em_module_release(ref);
    em_ddp_free(ddp);
    em_module_release(m);
}

/* The loss of shard q on m (q's setting of use_c: c reaches rank 0's loss only). */
static em_tensor *loss_of(em_module *m, int q) {
    ((toy_data *)em_module_data(m))->use_c = q == 0;
    em_tensor *x = shard(q), *l = NULL;
    OK(em_module_forward(m, x, true, &l));
    em_tensor_release(x);
    return l;
}

static void check_average(size_t bucket_bytes) {
    em_module *m = make_toy(7u + (uint64_t)g_rank);
    em_ddp *ddp = NULL;
    OK(em_ddp_create(g_d, m, bucket_bytes, &ddp));
    em_params *ps = NULL;
    OK(em_params_create(&ps));
    OK(em_module_params(m, NULL, ps));
    const size_t np = em_params_count(ps);
    assert_int_equal(np, 5);
    /* the expected averages, from every shard's gradients computed here */
    double *want[5] = {NULL};
    bool any[5] = {false};
    for (size_t i = 0; i < np; i++) {
        want[i] = calloc((size_t)em_tensor_numel(em_params_get(ps, i)), sizeof(double));
        assert_non_null(want[i]);
    }
    for (int q = 0; q < g_size; q++) {
        em_tensor *l = loss_of(m, q);
        em_grads *g = NULL;
        OK(em_backward(l, &g));
        for (size_t i = 0; i < np; i++) {
            em_tensor *gi = NULL;
            OK(em_grads_get(g, em_params_get(ps, i), &gi));
            if (gi == NULL) continue;
            any[i] = true;
            double *v = values(gi);
            for (int64_t k = 0; k < em_tensor_numel(gi); k++) want[i][k] += v[k] / g_size;
            free(v);
            em_tensor_release(gi);
        }
        em_grads_release(g);
        em_tensor_release(l);
    }
    assert_true(any[0] && any[1] && any[2] && !any[3] && any[4]); /* a, b, c, e; never d */
    /* this rank's shard through em_ddp_backward, inside a scope (its tensors are its own) */
    OK(em_scope_begin());
    em_tensor *l = loss_of(m, g_rank);
    em_grads *g = NULL;
    OK(em_ddp_backward(ddp, l, &g));
    OK(em_scope_end());
    for (size_t i = 0; i < np; i++) {
        const em_tensor *p = em_params_get(ps, i);
        em_tensor *gi = NULL;
        OK(em_grads_get(g, p, &gi));
        if (!any[i]) {
            assert_null(gi); /* no rank reached d: no gradient */
            continue;
        }
        assert_non_null(gi);
        assert_int_equal(em_tensor_dtype(gi), em_tensor_dtype(p));
        assert_int_equal(em_tensor_rank(gi), em_tensor_rank(p));
        assert_false(em_tensor_is_tracked(gi));
        double *v = values(gi);
        for (int64_t k = 0; k < em_tensor_numel(gi); k++) {
            double tol = 1e-6 * (fabs(want[i][k]) + 1e-3);
            if (fabs(v[k] - want[i][k]) > tol)
                fail_msg("bucket_bytes %zu, rank %d: %s[%lld] = %.9g, want %.9g", bucket_bytes,
                         g_rank, em_params_name(ps, i), (long long)k, v[k], want[i][k]);
        }
        free(v);
        assert_same_everywhere(gi);
        em_tensor_release(gi);
    }
    /* a step with the averages keeps the replicas equal */
    em_optimizer *opt = NULL;
    OK(em_optimizer_adam(ps, 1e-2, 0.9, 0.999, 1e-8, 0, &opt));
    OK(em_optimizer_step(opt, g, 1.0));
    for (size_t i = 0; i < np; i++) assert_same_everywhere(em_params_get(ps, i));
    em_optimizer_release(opt);
    em_grads_release(g);
    /* a second backward on the same trainer (its buckets reset) */
    l = loss_of(m, g_rank);
    OK(em_ddp_backward(ddp, l, &g));
    for (size_t i = 0; i < np; i++) {
        em_tensor *gi = NULL;
        OK(em_grads_get(g, em_params_get(ps, i), &gi));
        assert_true((gi != NULL) == any[i]);
        if (gi) assert_same_everywhere(gi);
        em_tensor_release(gi);
    }
    em_grads_release(g);
    em_tensor_release(l);
    for (size_t i = 0; i < np; i++) free(want[i]);
    em_params_release(ps);
    em_ddp_free(ddp);
    em_module_release(m);
}

/* bucket_bytes 1: smaller than every parameter (one bucket each) */
static void test_average_tiny_buckets(void **state) {
    (void)state;
    check_average(1);
}
/* 40 bytes, filled last parameter first: e (f64) alone; d (12 B, reached by no rank) and c
 * (32 B) share one, b (16 B) and a (80 B) another */
static void test_average_mid_buckets(void **state) {
    (void)state;
    check_average(40);
}
/* 0: the default 25 MiB, larger than all (one bucket per dtype) */
static void test_average_one_bucket(void **state) {
    (void)state;
    check_average(0);
}

static void test_args(void **state) {
    (void)state;
    em_module *m = make_toy(1);
    em_ddp *ddp = NULL;
    assert_int_equal(em_ddp_create(NULL, m, 0, &ddp), EM_ERR_ARG);
    assert_int_equal(em_ddp_create(g_d, NULL, 0, &ddp), EM_ERR_ARG);
    assert_int_equal(em_ddp_create(g_d, m, 0, NULL), EM_ERR_ARG);
    OK(em_ddp_create(g_d, m, 0, &ddp));
    em_grads *g = NULL;
    assert_int_equal(em_ddp_backward(NULL, NULL, &g), EM_ERR_ARG);
    assert_int_equal(em_ddp_backward(ddp, NULL, &g), EM_ERR_ARG);
    em_ddp_free(ddp);
    em_ddp_free(NULL);
    em_module_release(m);
}

int main(int argc, char **argv) {
    if (em_dist_init(&argc, &argv, &g_d) != EM_OK) {
        fprintf(stderr, "test_ddp: %s\n", em_last_error());
        return 1;
    }
    em_dist_set_timeout(g_d, 60); /* a failing rank makes the others fail, not hang */
    g_rank = em_dist_rank(g_d);
    g_size = em_dist_size(g_d);
    if (em_device_parse("cpu", &g_inner) != EM_OK) (void)em_device_parse("ref", &g_inner);
    if (em_device_autodiff(g_inner, EM_CKPT_DISABLED, &g_dev) != EM_OK) {
        fprintf(stderr, "test_ddp: %s\n", em_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_create_broadcasts),
        cmocka_unit_test(test_average_tiny_buckets),
        cmocka_unit_test(test_average_mid_buckets),
        cmocka_unit_test(test_average_one_bucket),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    em_dist_free(g_d);
    return failed ? 1 : 0;
}
