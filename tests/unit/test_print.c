/* test_print.c — em_tensor_format / em_tensor_print: PyTorch's repr conventions (one number
 * format per tensor, summarised above 1000 elements), shapes, dtypes, devices, bad input. */
#include "errcheck.h"

static em_device cpu(void) {
    em_device d;
    assert_int_equal(em_device_parse("ref", &d), EM_OK);
    return d;
}

static void expect_text(const em_tensor *t, const char *want) {
    char buf[4096];
    size_t len = 0;
    assert_int_equal(em_tensor_format(t, buf, sizeof buf, &len), EM_OK);
    assert_string_equal(buf, want);
    assert_int_equal(len, strlen(want));
}

static em_tensor *f32(const float *v, const int64_t *shape, int rank) {
    em_tensor *t = NULL;
    assert_int_equal(em_tensor_from_data(v, EM_F32, shape, rank, cpu(), &t), EM_OK);
    return t;
}

static void test_formats(void **state) {
    (void)state;
    em_tensor *t = f32((const float[]){0.1f, -2, 3.5f, 4}, (const int64_t[]){2, 2}, 2);
    expect_text(t, "tensor([[ 0.1000, -2.0000],\n"
                   "        [ 3.5000,  4.0000]], shape=[2, 2], dtype=f32, device=ref)");
    em_tensor_release(t);
    t = f32((const float[]){1, -2, 30}, (const int64_t[]){3}, 1);
    expect_text(t, "tensor([ 1., -2., 30.], shape=[3], dtype=f32, device=ref)");
    em_tensor_release(t);
    t = f32((const float[]){1e-5f, 2, NAN, INFINITY}, (const int64_t[]){4}, 1);
    expect_text(t, "tensor([1.0000e-05, 2.0000e+00,        nan,        inf], shape=[4], "
                   "dtype=f32, device=ref)");
    em_tensor_release(t);
    t = f32((const float[]){2.5f}, NULL, 0);
    expect_text(t, "tensor(2.5000, shape=[], dtype=f32, device=ref)");
    em_tensor_release(t);
    t = NULL;
    assert_int_equal(em_zeros((const int64_t[]){0, 3}, 2, EM_F32, cpu(), &t), EM_OK);
    expect_text(t, "tensor([], shape=[0, 3], dtype=f32, device=ref)");
    em_tensor_release(t);
    int64_t iv[3] = {7, -100, 3};
    assert_int_equal(em_tensor_from_data(iv, EM_I64, (const int64_t[]){3}, 1, cpu(), &t), EM_OK);
    expect_text(t, "tensor([   7, -100,    3], shape=[3], dtype=i64, device=ref)");
    em_tensor_release(t);
    bool bv[2] = {true, false};
    assert_int_equal(em_tensor_from_data(bv, EM_BOOL, (const int64_t[]){2}, 1, cpu(), &t),
                     EM_OK);
    expect_text(t, "tensor([ True, False], shape=[2], dtype=bool, device=ref)");
    em_tensor_release(t);
    /* a leaf that requires grad says so; a view prints its own elements */
    em_device ad;
    assert_int_equal(em_device_parse("ref+autodiff", &ad), EM_OK);
    assert_int_equal(em_ones((const int64_t[]){2, 3}, 2, EM_F64, ad, &t), EM_OK);
    assert_int_equal(em_tensor_require_grad(t), EM_OK);
    em_tensor *v = NULL;
    assert_int_equal(em_transpose(t, 0, 1, &v), EM_OK);
    expect_text(v, "tensor([[1., 1.],\n        [1., 1.],\n        [1., 1.]], shape=[3, 2], "
                   "dtype=f64, device=ref+autodiff)");
    expect_text(t, "tensor([[1., 1., 1.],\n        [1., 1., 1.]], shape=[2, 3], dtype=f64, "
                   "device=ref+autodiff, requires_grad)");
    em_tensor_release(v);
    em_tensor_release(t);
}

static void test_summary(void **state) {
    (void)state;
    em_tensor *t = NULL, *r = NULL;
    assert_int_equal(em_arange(0, 2000, 1, EM_F32, cpu(), &t), EM_OK);
    assert_int_equal(em_reshape(t, (const int64_t[]){2, 1000}, 2, &r), EM_OK);
    expect_text(r, "tensor([[   0.,    1.,    2., ...,  997.,  998.,  999.],\n"
                   "        [1000., 1001., 1002., ..., 1997., 1998., 1999.]], shape=[2, 1000], "
                   "dtype=f32, device=ref)");
    em_tensor_release(r);
    assert_int_equal(em_reshape(t, (const int64_t[]){1000, 2}, 2, &r), EM_OK);
    expect_text(r, "tensor([[   0.,    1.],\n        [   2.,    3.],\n        [   4.,    5.],\n"
                   "        ...,\n        [1994., 1995.],\n        [1996., 1997.],\n"
                   "        [1998., 1999.]], shape=[1000, 2], dtype=f32, device=ref)");
    em_tensor_release(r);
    /* a short buffer: truncated, NUL-terminated, the full length reported */
    char small[8];
    size_t len = 0;
    assert_int_equal(em_tensor_format(t, small, sizeof small, &len), EM_OK);
    assert_string_equal(small, "tensor(");
    assert_true(len > 50);
    assert_int_equal(em_tensor_format(t, NULL, 0, &len), EM_OK);
    assert_int_equal(em_tensor_print(t), EM_OK);
    em_tensor_release(t);
}

static void test_bad(void **state) {
    (void)state;
    char buf[16];
    assert_int_equal(em_tensor_format(NULL, buf, sizeof buf, NULL), EM_ERR_ARG);
    em_tensor *t = NULL;
    assert_int_equal(em_zeros((const int64_t[]){2}, 1, EM_F32, cpu(), &t), EM_OK);
    assert_int_equal(em_tensor_format(t, NULL, 4, NULL), EM_ERR_ARG);
    assert_int_equal(em_tensor_print(NULL), EM_ERR_ARG);
    em_tensor_release(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_formats),
                                       cmocka_unit_test(test_summary), cmocka_unit_test(test_bad)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
