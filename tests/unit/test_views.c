/*
 * test_views.c — the view ops share their input's storage and get their geometry right:
 * strides and offsets of flip / permute / slice / expand / split / unsqueeze, em_tensor_can_mut
 * while a view lives, and reshape copying only when the strides do not allow a view.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "core/internal.h"

static em_device ref_dev(void) {
    em_device d = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    return d;
}

/** A contiguous f32 tensor holding 0, 1, 2, ... */
static em_tensor *iota(const int64_t *shape, int rank) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    float *data = malloc(sizeof(float) * (size_t)(n ? n : 1));
    assert_non_null(data);
    for (int64_t i = 0; i < n; i++) data[i] = (float)i;
    em_tensor *t = NULL;
    assert_int_equal(em_tensor_from_data(data, EM_F32, shape, rank, ref_dev(), &t), EM_OK);
    free(data);
    return t;
}

/** Asserts t's view geometry. */
static void expect_view(const em_tensor *t, int rank, const int64_t *shape,
                        const int64_t *strides, int64_t offset) {
    assert_int_equal(t->v.rank, rank);
    for (int i = 0; i < rank; i++) {
        assert_int_equal(t->v.shape[i], shape[i]);
        if (shape[i] != 1) assert_int_equal(t->v.strides[i], strides[i]);
    }
    assert_int_equal(t->v.offset, offset);
}

/** Asserts t's row-major values. */
static void expect_values(const em_tensor *t, const float *want, int64_t n) {
    assert_int_equal(em_tensor_numel(t), n);
    float got[64];
    assert_true(n <= 64);
    assert_int_equal(em_tensor_to_data(t, got, sizeof(float) * (size_t)n), EM_OK);
    for (int64_t i = 0; i < n; i++) assert_true(got[i] == want[i]);
}

static void test_views_share_storage(void **state) {
    (void)state;
    int64_t s234[3] = {2, 3, 4}, s64[2] = {6, 4}, e[4] = {5, 2, 3, 4};
    int perm[3] = {2, 0, 1}, fl[1] = {1};
    em_tensor *x = iota(s234, 3), *vs[12] = {0};
    int n = 0;
    assert_int_equal(em_reshape(x, s64, 2, &vs[n++]), EM_OK);
    assert_int_equal(em_flatten(x, 0, -1, &vs[n++]), EM_OK);
    assert_int_equal(em_permute(x, perm, 3, &vs[n++]), EM_OK);
    assert_int_equal(em_transpose(x, 0, 2, &vs[n++]), EM_OK);
    assert_int_equal(em_expand(x, e, 4, &vs[n++]), EM_OK);
    assert_int_equal(em_slice(x, 1, 1, 3, 1, &vs[n++]), EM_OK);
    assert_int_equal(em_unsqueeze(x, 1, &vs[n++]), EM_OK);
    assert_int_equal(em_flip(x, fl, 1, &vs[n++]), EM_OK);
    assert_int_equal(em_squeeze_all(x, &vs[n++]), EM_OK);
    size_t cnt = 0;
    assert_int_equal(em_split(x, 2, 2, &vs[n], 3, &cnt), EM_OK);
    assert_int_equal(cnt, 2);
    n += 2;
    for (int i = 0; i < n; i++) {
        assert_ptr_equal(vs[i]->st, x->st);
        assert_ptr_equal(vs[i]->v.buf, x->v.buf);
        assert_int_equal(vs[i]->dtype, EM_F32);
    }
    em_tensor *sq = NULL;
    assert_int_equal(em_squeeze(vs[6], 1, &sq), EM_OK); /* views of views too */
    assert_ptr_equal(sq->st, x->st);
    em_tensor_release(sq);
    for (int i = 0; i < n; i++) em_tensor_release(vs[i]);
    em_tensor_release(x);
}

static void test_flip_geometry(void **state) {
    (void)state;
    int64_t s34[2] = {3, 4};
    em_tensor *x = iota(s34, 2), *a = NULL, *b = NULL, *c = NULL;
    int d0[1] = {0}, d01[2] = {0, -1};
    assert_int_equal(em_flip(x, d0, 1, &a), EM_OK);
    expect_view(a, 2, s34, (int64_t[]){-4, 1}, 8);
    assert_int_equal(em_flip(x, d01, 2, &b), EM_OK);
    expect_view(b, 2, s34, (int64_t[]){-4, -1}, 11);
    float want_b[12] = {11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
    expect_values(b, want_b, 12);
    /* Flipping back restores the original geometry. */
    assert_int_equal(em_flip(b, d01, 2, &c), EM_OK);
    expect_view(c, 2, s34, (int64_t[]){4, 1}, 0);
    em_tensor_release(a);
    em_tensor_release(b);
    em_tensor_release(c);
    em_tensor_release(x);
}

static void test_permute_geometry(void **state) {
    (void)state;
    int64_t s234[3] = {2, 3, 4};
    em_tensor *x = iota(s234, 3), *p = NULL, *t = NULL;
    assert_int_equal(em_permute(x, (int[]){2, 0, 1}, 3, &p), EM_OK);
    expect_view(p, 3, (int64_t[]){4, 2, 3}, (int64_t[]){1, 12, 4}, 0);
    assert_false(em_tensor_is_contiguous(p));
    assert_int_equal(em_transpose(x, -1, 0, &t), EM_OK);
    expect_view(t, 3, (int64_t[]){4, 3, 2}, (int64_t[]){1, 4, 12}, 0);
    em_tensor_release(p);
    em_tensor_release(t);
    em_tensor_release(x);
}

static void test_slice_geometry(void **state) {
    (void)state;
    int64_t s10[1] = {10}, s46[2] = {4, 6};
    em_tensor *x = iota(s10, 1), *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    assert_int_equal(em_slice(x, 0, 2, 8, 2, &a), EM_OK);
    expect_view(a, 1, (int64_t[]){3}, (int64_t[]){2}, 2);
    assert_int_equal(em_slice(x, 0, 8, 2, -2, &b), EM_OK);
    expect_view(b, 1, (int64_t[]){3}, (int64_t[]){-2}, 8);
    expect_values(b, (float[]){8, 6, 4}, 3);
    assert_int_equal(em_slice(x, 0, INT64_MAX, INT64_MIN, -1, &c), EM_OK);
    expect_view(c, 1, s10, (int64_t[]){-1}, 9);
    assert_int_equal(em_slice(x, 0, 7, 3, 1, &d), EM_OK); /* empty */
    assert_int_equal(em_tensor_numel(d), 0);
    em_tensor_release(a);
    em_tensor_release(b);
    em_tensor_release(c);
    em_tensor_release(d);
    em_tensor_release(x);

    /* Offsets compose through a slice of a slice. */
    em_tensor *y = iota(s46, 2), *e = NULL, *f = NULL;
    assert_int_equal(em_slice(y, 1, 1, 5, 1, &e), EM_OK);
    expect_view(e, 2, (int64_t[]){4, 4}, (int64_t[]){6, 1}, 1);
    assert_int_equal(em_slice(e, 0, 2, INT64_MAX, 1, &f), EM_OK);
    expect_view(f, 2, (int64_t[]){2, 4}, (int64_t[]){6, 1}, 13);
    expect_values(f, (float[]){13, 14, 15, 16, 19, 20, 21, 22}, 8);
    em_tensor_release(e);
    em_tensor_release(f);
    em_tensor_release(y);
}

static void test_expand_split_unsqueeze_geometry(void **state) {
    (void)state;
    int64_t s31[2] = {3, 1}, s7[1] = {7};
    em_tensor *x = iota(s31, 2), *e = NULL;
    assert_int_equal(em_expand(x, (int64_t[]){2, 3, 4}, 3, &e), EM_OK);
    expect_view(e, 3, (int64_t[]){2, 3, 4}, (int64_t[]){0, 1, 0}, 0);
    em_tensor_release(e);
    em_tensor_release(x);

    em_tensor *y = iota(s7, 1), *parts[3] = {0};
    size_t n = 0;
    assert_int_equal(em_split(y, 3, 0, parts, 3, &n), EM_OK);
    assert_int_equal(n, 3);
    expect_view(parts[0], 1, (int64_t[]){3}, (int64_t[]){1}, 0);
    expect_view(parts[1], 1, (int64_t[]){3}, (int64_t[]){1}, 3);
    expect_view(parts[2], 1, (int64_t[]){1}, (int64_t[]){1}, 6);
    for (int i = 0; i < 3; i++) em_tensor_release(parts[i]);
    /* A cap too small writes nothing but still reports the count. */
    em_tensor *few[2] = {NULL, NULL};
    n = 0;
    assert_int_equal(em_split(y, 3, 0, few, 2, &n), EM_ERR_ARG);
    assert_int_equal(n, 3);
    assert_null(few[0]);
    em_tensor_release(y);

    float v = 5.0f;
    em_tensor *z = NULL, *u = NULL;
    assert_int_equal(em_tensor_from_data(&v, EM_F32, NULL, 0, ref_dev(), &z), EM_OK);
    assert_int_equal(em_unsqueeze(z, -1, &u), EM_OK);
    expect_view(u, 1, (int64_t[]){1}, (int64_t[]){1}, 0);
    assert_ptr_equal(u->st, z->st);
    em_tensor_release(u);
    em_tensor_release(z);
}

static void test_can_mut(void **state) {
    (void)state;
    int64_t s23[2] = {2, 3};
    em_tensor *x = iota(s23, 2), *v = NULL;
    assert_true(em_tensor_can_mut(x));
    assert_int_equal(em_transpose(x, 0, 1, &v), EM_OK);
    assert_false(em_tensor_can_mut(x));
    assert_false(em_tensor_can_mut(v));
    em_tensor_release(v);
    assert_true(em_tensor_can_mut(x));
    /* A view alone keeps the buffer once its base is gone. */
    assert_int_equal(em_slice(x, 1, 0, 2, 1, &v), EM_OK);
    em_tensor_release(x);
    assert_true(em_tensor_can_mut(v));
    expect_values(v, (float[]){0, 1, 3, 4}, 4);
    em_tensor_release(v);

    /* The copying layout ops return tensors that own their buffers. */
    em_tensor *a = iota(s23, 2), *c = NULL, *r = NULL;
    const em_tensor *pair[2] = {a, a};
    assert_int_equal(em_cat(pair, 2, 0, &c), EM_OK);
    assert_true(em_tensor_can_mut(c));
    assert_int_equal(em_repeat(a, (int64_t[]){1, 1}, 2, &r), EM_OK);
    assert_true(em_tensor_can_mut(r));
    assert_ptr_not_equal(r->st, a->st);
    em_tensor_release(c);
    em_tensor_release(r);
    em_tensor_release(a);
}

/* em_tensor_host_data: the first element of a contiguous host tensor (a slice's too), written
 * through; refused for strided views, quantized tensors and non-host devices. */
static void test_host_data(void **state) {
    (void)state;
    int64_t s23[2] = {2, 3};
    em_tensor *x = iota(s23, 2), *row = NULL, *tr = NULL, *c = NULL;
    float *p = NULL;
    assert_int_equal(em_tensor_host_data(x, (void **)&p), EM_OK);
    assert_true(p[4] == 4.0f);
    p[4] = 40.0f; /* writes x */
    expect_values(x, (float[]){0, 1, 2, 3, 40, 5}, 6);
    assert_int_equal(em_slice(x, 0, 1, 2, 1, &row), EM_OK); /* row 1: offset 3, contiguous */
    float *q = NULL;
    assert_int_equal(em_tensor_host_data(row, (void **)&q), EM_OK);
    assert_ptr_equal(q, p + 3);
    assert_int_equal(em_transpose(x, 0, 1, &tr), EM_OK);
    void *bad = (void *)1;
    assert_int_equal(em_tensor_host_data(tr, &bad), EM_ERR_UNSUPPORTED);
    assert_ptr_equal(bad, (void *)1);
    assert_int_equal(em_tensor_host_data(NULL, &bad), EM_ERR_ARG);
    assert_int_equal(em_tensor_host_data(x, NULL), EM_ERR_ARG);
    em_tensor *qt = NULL;
    assert_int_equal(em_quantize(x, EM_Q8, &qt), EM_OK);
    assert_int_equal(em_tensor_host_data(qt, &bad), EM_ERR_DTYPE);
    em_device ocl; /* device memory, where the machine has an OpenCL device */
    if (em_device_parse("opencl", &ocl) == EM_OK) {
        assert_int_equal(em_zeros(s23, 2, EM_F32, ocl, &c), EM_OK);
        assert_int_equal(em_tensor_host_data(c, &bad), EM_ERR_UNSUPPORTED);
    }
    em_tensor_release(c), em_tensor_release(qt), em_tensor_release(tr), em_tensor_release(row);
    em_tensor_release(x);
}

static void test_reshape_copies_when_needed(void **state) {
    (void)state;
    int64_t s34[2] = {3, 4}, s12[1] = {12}, s26[2] = {2, 6};
    em_tensor *x = iota(s34, 2), *t = NULL, *r = NULL, *r2 = NULL;
    /* Contiguous: a view. */
    assert_int_equal(em_reshape(x, s26, 2, &r), EM_OK);
    assert_ptr_equal(r->st, x->st);
    em_tensor_release(r);
    /* Transposed: the strides cannot be merged, so a copy. */
    assert_int_equal(em_transpose(x, 0, 1, &t), EM_OK);
    assert_int_equal(em_reshape(t, s12, 1, &r), EM_OK);
    assert_ptr_not_equal(r->st, x->st);
    assert_true(em_tensor_is_contiguous(r));
    expect_values(r, (float[]){0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, 12);
    /* Splitting a transposed dim is still a view. */
    assert_int_equal(em_reshape(t, (int64_t[]){2, 2, 3}, 3, &r2), EM_OK);
    assert_ptr_equal(r2->st, x->st);
    expect_view(r2, 3, (int64_t[]){2, 2, 3}, (int64_t[]){2, 1, 4}, 0);
    em_tensor_release(r2);
    em_tensor_release(r);
    em_tensor_release(t);
    /* A flipped 1-d tensor reshapes as a view with negative strides. */
    em_tensor *f = NULL, *ff = NULL, *fr = NULL;
    assert_int_equal(em_reshape(x, s12, 1, &ff), EM_OK);
    assert_int_equal(em_flip(ff, (int[]){0}, 1, &f), EM_OK);
    assert_int_equal(em_reshape(f, (int64_t[]){3, -1}, 2, &fr), EM_OK);
    assert_ptr_equal(fr->st, x->st);
    expect_view(fr, 2, s34, (int64_t[]){-4, -1}, 11);
    em_tensor_release(fr);
    em_tensor_release(f);
    em_tensor_release(ff);
    em_tensor_release(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_views_share_storage),
        cmocka_unit_test(test_flip_geometry),
        cmocka_unit_test(test_permute_geometry),
        cmocka_unit_test(test_slice_geometry),
        cmocka_unit_test(test_expand_split_unsqueeze_geometry),
        cmocka_unit_test(test_can_mut),
        cmocka_unit_test(test_reshape_copies_when_needed),
        cmocka_unit_test(test_host_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
