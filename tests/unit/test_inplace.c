/*
 * test_inplace.c — the consuming `_` variants (em_add_, em_sub_, em_mul_, em_div_,
 * em_mul_scalar_, em_add_scalar_, em_relu_, em_exp_): they write into their first input's buffer
 * exactly when em_tensor_can_mut() holds (and the result has its shape and dtype, and it is
 * contiguous), and otherwise compute out of place, leaving other holders of the buffer
 * untouched. Values are right either way; the consumed input never leaks (run under LSan).
 * Also em_tensor_assign_: the destination takes the source's buffer when nobody else holds
 * either, and copies otherwise (views of dst see the values, a shared src stays intact).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"
#include "ember/ember.h"

static em_device ref_dev(void) {
    em_device d = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    return d;
}

/* An f32 tensor of the given shape and values on ref. */
static em_tensor *f32(const float *vals, const int64_t *shape, int rank) {
    em_tensor *t = NULL;
    assert_int_equal(em_tensor_from_data(vals, EM_F32, shape, rank, ref_dev(), &t), EM_OK);
    return t;
}

/* A 1-d f32 tensor. */
static em_tensor *f32v(const float *vals, int64_t n) { return f32(vals, &n, 1); }

/* Asserts t holds exactly the n f32 values want (row-major). */
static void expect_f32(const em_tensor *t, const float *want, int64_t n) {
    assert_int_equal(em_tensor_numel(t), n);
    float got[16];
    assert_true(n <= 16);
    assert_int_equal(em_tensor_to_data(t, got, sizeof got), EM_OK);
    for (int64_t i = 0; i < n; i++)
        assert_float_equal(got[i], want[i], 1e-6 * (fabsf(want[i]) > 1 ? fabsf(want[i]) : 1));
}

/* The buffer a tensor writes into. */
static void *buf_of(const em_tensor *t) { return t->st->buf; }

/* can_mut holds: the result is a itself, in a's buffer. */
static void test_add_in_place(void **state) {
    (void)state;
    const float av[4] = {1, 2, 3, 4}, bv[4] = {10, 20, 30, 40};
    em_tensor *a = f32v(av, 4), *b = f32v(bv, 4), *out = NULL;
    assert_true(em_tensor_can_mut(a));
    void *before = buf_of(a);
    assert_int_equal(em_add_(a, b, &out), EM_OK);
    assert_ptr_equal(out, a);
    assert_ptr_equal(buf_of(out), before);
    expect_f32(out, (const float[]){11, 22, 33, 44}, 4);
    em_tensor_release(out);
    em_tensor_release(b);
}

/* Every consuming variant reuses the buffer when it may, with the right values. */
static void test_all_variants_in_place(void **state) {
    (void)state;
    const float av[4] = {-1, 2, -3, 8}, bv[4] = {2, 4, 2, -2};
    em_tensor *b = f32v(bv, 4);
    struct {
        const char *name;
        float want[4];
    } cases[] = {
        {"sub_", {-3, -2, -5, 10}},     {"mul_", {-2, 8, -6, -16}},
        {"div_", {-0.5f, 0.5f, -1.5f, -4}}, {"mul_scalar_", {-3, 6, -9, 24}},
        {"add_scalar_", {-0.5f, 2.5f, -2.5f, 8.5f}}, {"relu_", {0, 2, 0, 8}},
        {"exp_", {0.36787944f, 7.3890561f, 0.049787068f, 2980.958f}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        em_tensor *a = f32v(av, 4), *out = NULL;
        void *before = buf_of(a);
        em_status s;
        const char *n = cases[i].name;
        if (strcmp(n, "sub_") == 0) s = em_sub_(a, b, &out);
        else if (strcmp(n, "mul_") == 0) s = em_mul_(a, b, &out);
        else if (strcmp(n, "div_") == 0) s = em_div_(a, b, &out);
        else if (strcmp(n, "mul_scalar_") == 0) s = em_mul_scalar_(a, 3.0, &out);
        else if (strcmp(n, "add_scalar_") == 0) s = em_add_scalar_(a, 0.5, &out);
        else if (strcmp(n, "exp_") == 0) s = em_exp_(a, &out);
        else s = em_relu_(a, &out);
        assert_int_equal(s, EM_OK);
        assert_ptr_equal(out, a);
        assert_ptr_equal(buf_of(out), before);
        expect_f32(out, cases[i].want, 4);
        em_tensor_release(out);
    }
    em_tensor_release(b);
}

/* Another reference to a: computed out of place; a keeps its values. */
static void test_shared_reference_not_reused(void **state) {
    (void)state;
    const float av[3] = {1, 2, 3}, bv[3] = {1, 1, 1};
    em_tensor *a = f32v(av, 3), *b = f32v(bv, 3), *out = NULL;
    em_tensor_retain(a); /* ours; the call consumes the other */
    assert_false(em_tensor_can_mut(a));
    assert_int_equal(em_add_(a, b, &out), EM_OK);
    assert_ptr_not_equal(out, a);
    assert_ptr_not_equal(buf_of(out), buf_of(a));
    expect_f32(out, (const float[]){2, 3, 4}, 3);
    expect_f32(a, av, 3);
    assert_true(em_tensor_can_mut(a)); /* the call released its reference */
    em_tensor_release(out);
    em_tensor_release(a);
    em_tensor_release(b);
}

/* A view shares a's buffer: computed out of place; the view keeps its values. */
static void test_view_not_reused(void **state) {
    (void)state;
    const float av[6] = {1, 2, 3, 4, 5, 6};
    const int64_t shape[2] = {2, 3};
    em_tensor *a = f32(av, shape, 2), *v = NULL, *out = NULL;
    assert_int_equal(em_transpose(a, 0, 1, &v), EM_OK);
    assert_ptr_equal(buf_of(v), buf_of(a));
    assert_false(em_tensor_can_mut(a));
    void *shared = buf_of(a);
    assert_int_equal(em_mul_scalar_(a, 10.0, &out), EM_OK);
    assert_ptr_not_equal(buf_of(out), shared);
    expect_f32(out, (const float[]){10, 20, 30, 40, 50, 60}, 6);
    expect_f32(v, (const float[]){1, 4, 2, 5, 3, 6}, 6);
    em_tensor_release(out);
    em_tensor_release(v);
}

/* The view itself, once the base is gone, owns the buffer; a non-contiguous one is still
 * computed out of place (outputs are contiguous), a contiguous one in place. */
static void test_sole_view(void **state) {
    (void)state;
    const float av[6] = {1, -2, 3, -4, 5, -6};
    const int64_t shape[2] = {2, 3};
    em_tensor *a = f32(av, shape, 2), *t = NULL, *out = NULL;
    assert_int_equal(em_transpose(a, 0, 1, &t), EM_OK);
    em_tensor_release(a);
    assert_true(em_tensor_can_mut(t));
    assert_false(em_tensor_is_contiguous(t));
    void *before = buf_of(t);
    assert_int_equal(em_relu_(t, &out), EM_OK);
    assert_ptr_not_equal(buf_of(out), before);
    assert_true(em_tensor_is_contiguous(out));
    expect_f32(out, (const float[]){1, 0, 0, 5, 3, 0}, 6);
    em_tensor_release(out);

    /* a contiguous slice (the second row), alone: reused, at its offset */
    a = f32(av, shape, 2);
    em_tensor *row = NULL;
    assert_int_equal(em_slice(a, 0, 1, 2, 1, &row), EM_OK);
    em_tensor_release(a);
    assert_true(em_tensor_can_mut(row));
    before = buf_of(row);
    assert_int_equal(em_add_scalar_(row, 1.0, &out), EM_OK);
    assert_ptr_equal(out, row);
    assert_ptr_equal(buf_of(out), before);
    expect_f32(out, (const float[]){-3, 6, -5}, 3);
    em_tensor_release(out);
}

/* The result is larger than a (b broadcasts a up): out of place, a released. */
static void test_broadcast_grows(void **state) {
    (void)state;
    const float av[3] = {1, 2, 3}, bv[6] = {0, 10, 20, 30, 40, 50};
    const int64_t shape[2] = {2, 3};
    em_tensor *a = f32v(av, 3), *b = f32(bv, shape, 2), *out = NULL;
    assert_int_equal(em_add_(a, b, &out), EM_OK);
    assert_int_equal(em_tensor_rank(out), 2);
    expect_f32(out, (const float[]){1, 12, 23, 31, 42, 53}, 6);
    em_tensor_release(out);
    em_tensor_release(b);
}

/* b broadcasts into a's shape: still in place. */
static void test_broadcast_b_in_place(void **state) {
    (void)state;
    const float av[6] = {1, 2, 3, 4, 5, 6}, bv[3] = {1, 0, -1};
    const int64_t shape[2] = {2, 3};
    em_tensor *a = f32(av, shape, 2), *b = f32v(bv, 3), *out = NULL;
    void *before = buf_of(a);
    assert_int_equal(em_mul_(a, b, &out), EM_OK);
    assert_ptr_equal(out, a);
    assert_ptr_equal(buf_of(out), before);
    expect_f32(out, (const float[]){1, 0, -3, 4, 0, -6}, 6);
    em_tensor_release(out);
    em_tensor_release(b);
}

/* a op a, passing the only reference as both operands. */
static void test_self_operand(void **state) {
    (void)state;
    const float av[3] = {1, -2, 3};
    em_tensor *a = f32v(av, 3), *out = NULL;
    void *before = buf_of(a);
    assert_int_equal(em_mul_(a, a, &out), EM_OK);
    assert_ptr_equal(buf_of(out), before);
    expect_f32(out, (const float[]){1, 4, 9}, 3);
    em_tensor_release(out);
}

/* Integer in place: wraps in the dtype's width and floors division. */
static void test_int_in_place(void **state) {
    (void)state;
    const int8_t av[3] = {100, -7, 7}, bv[3] = {100, 2, -2};
    const int64_t n = 3;
    em_tensor *a = NULL, *b = NULL, *out = NULL;
    assert_int_equal(em_tensor_from_data(av, EM_I8, &n, 1, ref_dev(), &a), EM_OK);
    assert_int_equal(em_tensor_from_data(bv, EM_I8, &n, 1, ref_dev(), &b), EM_OK);
    void *before = buf_of(a);
    assert_int_equal(em_add_(a, b, &out), EM_OK);
    assert_ptr_equal(buf_of(out), before);
    int8_t got[3];
    assert_int_equal(em_tensor_to_data(out, got, sizeof got), EM_OK);
    assert_int_equal(got[0], -56);
    assert_int_equal(got[1], -5);
    assert_int_equal(got[2], 5);
    a = out;
    assert_int_equal(em_div_(a, b, &out), EM_OK); /* [-56, -5, 5] // [100, 2, -2] */
    assert_ptr_equal(buf_of(out), before);
    assert_int_equal(em_tensor_to_data(out, got, sizeof got), EM_OK);
    assert_int_equal(got[0], -1);
    assert_int_equal(got[1], -3);
    assert_int_equal(got[2], -3);
    em_tensor_release(out);
    em_tensor_release(b);
}

/* An empty tensor: nothing to compute, the handle comes back. */
static void test_empty(void **state) {
    (void)state;
    const int64_t shape[2] = {0, 3};
    em_tensor *a = NULL, *out = NULL;
    assert_int_equal(em_zeros(shape, 2, EM_F32, ref_dev(), &a), EM_OK);
    assert_int_equal(em_add_scalar_(a, 1.0, &out), EM_OK);
    assert_ptr_equal(out, a);
    assert_int_equal(em_tensor_numel(out), 0);
    em_tensor_release(out);
}

/* Failures consume a too (LSan would report a leak otherwise) and write nothing. */
static void test_failure_consumes(void **state) {
    (void)state;
    const float av[3] = {1, 2, 3}, bv[2] = {1, 2};
    em_tensor *b = f32v(bv, 2);
    em_tensor *sentinel = (em_tensor *)(uintptr_t)0x5e5e5e50u;

    em_tensor *out = sentinel;
    assert_int_equal(em_add_(f32v(av, 3), b, &out), EM_ERR_SHAPE); /* [3] + [2] */
    assert_ptr_equal(out, sentinel);
    assert_non_null(strstr(em_last_error(), "em_add_"));

    em_tensor *i = NULL;
    const int64_t n = 2;
    const int32_t iv[2] = {1, 2};
    assert_int_equal(em_tensor_from_data(iv, EM_I32, &n, 1, ref_dev(), &i), EM_OK);
    assert_int_equal(em_mul_(f32v(bv, 2), i, &out), EM_ERR_DTYPE);
    assert_ptr_equal(out, sentinel);

    assert_int_equal(em_sub_(f32v(av, 3), NULL, &out), EM_ERR_ARG);
    assert_int_equal(em_div_(f32v(av, 3), b, NULL), EM_ERR_ARG);
    assert_int_equal(em_relu_(f32v(av, 3), NULL), EM_ERR_ARG);
    assert_int_equal(em_mul_scalar_(f32v(av, 3), 2.0, NULL), EM_ERR_ARG);
    assert_int_equal(em_relu_(NULL, &out), EM_ERR_ARG);
    assert_ptr_equal(out, sentinel);

    const uint8_t bools[2] = {1, 0};
    em_tensor *bb = NULL;
    assert_int_equal(em_tensor_from_data(bools, EM_BOOL, &n, 1, ref_dev(), &bb), EM_OK);
    assert_int_equal(em_add_scalar_(bb, 1.0, &out), EM_ERR_DTYPE); /* consumes bb */
    assert_ptr_equal(out, sentinel);

    em_tensor_release(i);
    em_tensor_release(b);
}

/* em_tensor_assign_: a take when both buffers are private, a copy otherwise, src consumed on
 * every path (errors included), an autodiff leaf keeps its mark. */
static void test_assign_takes_buffer(void **state) {
    (void)state;
    const float a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, c[3] = {7, 8, 9};
    em_tensor *dst = f32v(a, 3), *src = f32v(b, 3);
    void *srcbuf = src->v.buf;
    assert_int_equal(em_tensor_assign_(dst, src), EM_OK);
    assert_ptr_equal(dst->v.buf, srcbuf);
    expect_f32(dst, b, 3);
    /* a view of dst: copied into the shared buffer, the view sees it */
    em_tensor *view = NULL;
    assert_int_equal(em_reshape(dst, (int64_t[]){3}, 1, &view), EM_OK);
    src = f32v(c, 3);
    void *dstbuf = dst->v.buf;
    assert_int_equal(em_tensor_assign_(dst, src), EM_OK);
    assert_ptr_equal(dst->v.buf, dstbuf);
    expect_f32(view, c, 3);
    em_tensor_release(view);
    /* a src someone else holds: copied, and the holder's values stay */
    src = f32v(a, 3);
    em_tensor_retain(src);
    assert_int_equal(em_tensor_assign_(dst, src), EM_OK);
    expect_f32(dst, a, 3);
    expect_f32(src, a, 3);
    assert_ptr_not_equal(dst->v.buf, src->v.buf);
    em_tensor_release(src);
    /* errors consume src too */
    src = f32(b, (int64_t[]){1, 3}, 2);
    assert_int_equal(em_tensor_assign_(dst, src), EM_ERR_SHAPE);
    assert_int_equal(em_tensor_assign_(NULL, f32v(b, 3)), EM_ERR_ARG);
    expect_f32(dst, a, 3);
    em_tensor_release(dst);
    /* an autodiff leaf takes an untracked value and stays a leaf requiring grad */
    em_device ad;
    assert_int_equal(em_device_parse("ref+autodiff", &ad), EM_OK);
    em_tensor *leaf = NULL;
    assert_int_equal(em_tensor_from_data(a, EM_F32, (int64_t[]){3}, 1, ad, &leaf), EM_OK);
    assert_int_equal(em_tensor_require_grad(leaf), EM_OK);
    assert_int_equal(em_tensor_assign_(leaf, f32v(c, 3)), EM_OK);
    assert_true(em_tensor_requires_grad(leaf));
    expect_f32(leaf, c, 3);
    em_tensor_release(leaf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_in_place),
        cmocka_unit_test(test_assign_takes_buffer),
        cmocka_unit_test(test_all_variants_in_place),
        cmocka_unit_test(test_shared_reference_not_reused),
        cmocka_unit_test(test_view_not_reused),
        cmocka_unit_test(test_sole_view),
        cmocka_unit_test(test_broadcast_grows),
        cmocka_unit_test(test_broadcast_b_in_place),
        cmocka_unit_test(test_self_operand),
        cmocka_unit_test(test_int_in_place),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_failure_consumes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
