/* test_torch.c — the torch backend (the plugin libember-torch.so) beyond what the conformance
 * table checks: every kernel slot is torch's own (none silently ref's), em_to_device between
 * cpu and torch copies nothing and keeps both sides safe, torch's exceptions come back as
 * statuses, its memory stats, and products split over ATen's threads (rows of several batches
 * per part) equal to ref's, with OpenBLAS's thread count left as it was found. Skipped (77) when the plugin is not built. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dlfcn.h>

#include "core/internal.h"
#include "ember/backend.h"

static em_device torch_dev, cpu_dev;

static em_tensor *from_f32(const float *v, const int64_t *shape, int rank, em_device dev) {
    em_tensor *t = NULL;
    assert_int_equal(em_tensor_from_data(v, EM_F32, shape, rank, dev, &t), EM_OK);
    return t;
}

/* Every kernel slot the backend is meant to fill is its own: the registry would fill a NULL
 * one with ref's kernel and the table would still pass. random (ember's Philox) and the
 * quantized slots are ref's by design. */
static void test_native_slots(void **state) {
    (void)state;
    const em_backend_ops *o = em_backend_get_native(EM_BACKEND_TORCH);
    assert_non_null(o);
    assert_int_equal(o->abi_version, EM_BACKEND_ABI_VERSION);
    assert_true(o->caps & EM_CAP_HOST_MEMORY);
    const struct {
        const char *name;
        const void *fn;
    } slots[] = {
#define S(x) {#x, (const void *)o->x}
        S(fill), S(arange), S(copy), S(unary), S(binary), S(binary_scalar), S(where), S(reduce),
        S(cumsum), S(softmax), S(matmul), S(gather), S(scatter_add), S(index_select), S(sort),
        S(conv2d), S(conv_transpose2d), S(max_pool2d), S(avg_pool2d), S(adaptive_avg_pool2d),
        S(conv2d_weight_grad), S(avg_pool2d_backward), S(adaptive_avg_pool2d_backward),
        S(layer_norm), S(unary_backward), S(adam_step), S(batch_norm), S(batch_norm_backward),
        S(group_norm), S(rms_norm), S(cumulative), S(sdpa), S(sdpa_backward),
#undef S
    };
    int missing = 0;
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
        if (!slots[i].fn) {
            printf("torch: slot %s is not the backend's own\n", slots[i].name);
            missing++;
        }
    assert_int_equal(missing, 0);
    assert_null(o->random);
    assert_null(o->quantize);
}

/* cpu -> torch -> cpu copies nothing: the same buffer; each side outlives the other; neither is
 * written in place while the other stands. */
static void test_to_device_zero_copy(void **state) {
    (void)state;
    float v[6] = {1, 2, 3, 4, 5, 6}, r[6];
    int64_t shape[2] = {2, 3};
    em_tensor *c = from_f32(v, shape, 2, cpu_dev), *t, *back, *tt;
    assert_int_equal(em_to_device(c, torch_dev, &t), EM_OK);
    assert_ptr_equal(t->v.buf, c->v.buf);
    assert_true(em_device_equal(em_tensor_device(t), torch_dev));
    assert_false(em_tensor_can_mut(t));
    assert_false(em_tensor_can_mut(c));
    /* a transposed view moves as a view of the same memory */
    assert_int_equal(em_transpose(c, 0, 1, &tt), EM_OK);
    em_tensor *ttt;
    assert_int_equal(em_to_device(tt, torch_dev, &ttt), EM_OK);
    assert_ptr_equal(ttt->v.buf, c->v.buf);
    assert_int_equal(em_tensor_to_data(ttt, r, sizeof r), EM_OK);
    const float want_t[6] = {1, 4, 2, 5, 3, 6};
    for (int i = 0; i < 6; i++) assert_true(r[i] == want_t[i]);
    em_tensor_release(ttt);
    em_tensor_release(tt);
    /* the source goes first: torch's tensor still reads it (ASan would see a use after free) */
    em_tensor_release(c);
    assert_true(em_tensor_can_mut(t)); /* the buffer is its alone now */
    assert_int_equal(em_to_device(t, cpu_dev, &back), EM_OK);
    assert_ptr_equal(back->v.buf, t->v.buf);
    em_tensor *sum;
    assert_int_equal(em_add(t, t, &sum), EM_OK); /* on torch */
    assert_true(em_device_equal(em_tensor_device(sum), torch_dev));
    em_tensor_release(t);
    assert_int_equal(em_tensor_to_data(back, r, sizeof r), EM_OK);
    for (int i = 0; i < 6; i++) assert_true(r[i] == v[i]);
    assert_int_equal(em_tensor_to_data(sum, r, sizeof r), EM_OK);
    for (int i = 0; i < 6; i++) assert_true(r[i] == 2 * v[i]);
    em_tensor_release(sum);
    em_tensor_release(back);
    /* a consuming op on a borrowed tensor must not write the other side's values */
    em_tensor *c2 = from_f32(v, shape, 2, cpu_dev), *t2, *one, *o2;
    assert_int_equal(em_to_device(c2, torch_dev, &t2), EM_OK);
    assert_int_equal(em_full(shape, 2, 1.0, EM_F32, torch_dev, &one), EM_OK);
    assert_int_equal(em_add_(t2, one, &o2), EM_OK); /* t2 consumed */
    assert_int_equal(em_tensor_to_data(c2, r, sizeof r), EM_OK);
    for (int i = 0; i < 6; i++) assert_true(r[i] == v[i]);
    assert_int_equal(em_tensor_to_data(o2, r, sizeof r), EM_OK);
    for (int i = 0; i < 6; i++) assert_true(r[i] == v[i] + 1);
    em_tensor_release(o2);
    em_tensor_release(one);
    em_tensor_release(c2);
}

/* A c10::Error inside a kernel is EM_ERR_BACKEND with torch's message (the core never sends
 * such views; a kernel called straight through the table can get one). */
static void test_torch_error_is_status(void **state) {
    (void)state;
    const em_backend_ops *o = em_backend_get_native(EM_BACKEND_TORCH);
    assert_non_null(o->matmul);
    int64_t sa[2] = {2, 3}, sb[2] = {4, 5}, so[2] = {2, 5};
    em_tensor *a, *b, *out;
    assert_int_equal(em_zeros(sa, 2, EM_F32, torch_dev, &a), EM_OK);
    assert_int_equal(em_zeros(sb, 2, EM_F32, torch_dev, &b), EM_OK);
    assert_int_equal(em_zeros(so, 2, EM_F32, torch_dev, &out), EM_OK);
    em_clear_error();
    em_status s = o->matmul(out->st->ctx, &out->v, &a->v, &b->v);
    assert_int_equal(s, EM_ERR_BACKEND);
    assert_non_null(strstr(em_last_error(), "torch: matmul"));
    em_tensor_release(a);
    em_tensor_release(b);
    em_tensor_release(out);
}

/* The caching allocator: bytes in use come back to zero, freed buffers are kept and reused,
 * em_device_memory_release hands them back. */
static void test_memory(void **state) {
    (void)state;
    em_memory_stats m0, m1, m2, m3;
    assert_int_equal(em_device_memory(torch_dev, &m0), EM_OK);
    int64_t shape[1] = {1 << 20};
    em_tensor *a;
    assert_int_equal(em_zeros(shape, 1, EM_F32, torch_dev, &a), EM_OK);
    assert_int_equal(em_device_memory(torch_dev, &m1), EM_OK);
    assert_true(m1.bytes_in_use >= m0.bytes_in_use + (4u << 20));
    assert_true(m1.peak_bytes >= m1.bytes_in_use);
    void *first = a->v.buf;
    em_tensor_release(a);
    assert_int_equal(em_device_memory(torch_dev, &m2), EM_OK);
    assert_int_equal(m2.bytes_in_use, m0.bytes_in_use);
    assert_true(m2.bytes_cached >= (4u << 20));
    assert_int_equal(em_zeros(shape, 1, EM_F32, torch_dev, &a), EM_OK);
    assert_ptr_equal(a->v.buf, first); /* the cached buffer */
    em_tensor_release(a);
    assert_int_equal(em_device_memory_release(torch_dev), EM_OK);
    assert_int_equal(em_device_memory(torch_dev, &m3), EM_OK);
    assert_int_equal(m3.bytes_cached, 0);
}

/* Products large enough to be split over ATen's intra-op threads (emt::bmm_into: parts of
 * rows that cross the batches' borders, an uneven split) give ref's values, for float, double
 * and int (wrapping int64) operands, transposed operands and a strided output dtype (f16);
 * OpenBLAS's process-wide thread count is what it was before (the backend runs it at one
 * thread while its products run, and restores it). */
static void test_split_products(void **state) {
    (void)state;
    em_device ref_dev;
    assert_int_equal(em_device_parse("ref", &ref_dev), EM_OK);
    int (*blas_get)(void) = NULL;
    void *g = dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    if (g) memcpy(&blas_get, &g, sizeof blas_get);
    const int blas_before = blas_get ? blas_get() : 0;
    const em_dtype dts[] = {EM_F32, EM_F64, EM_I32, EM_F16};
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
        for (int trans = 0; trans < 2; trans++) {
            /* [3, 37, 300] @ [3, 300, 129]: 111 rows, ~4.3M multiply-adds */
            int64_t sa[3] = {3, 37, 300}, sb[3] = {3, 300, 129};
            if (trans) sb[1] = 129, sb[2] = 300; /* b given as [3, 129, 300], used transposed */
            em_tensor *a, *b, *ar, *br, *btr, *o, *orf, *oc;
            assert_int_equal(em_rand_uniform(sa, 3, EM_F32, -1, 1, 7, ref_dev, &a), EM_OK);
            assert_int_equal(em_rand_uniform(sb, 3, EM_F32, -1, 1, 8, ref_dev, &b), EM_OK);
            if (dts[di] == EM_I32) { /* small ints: exact products */
                em_tensor *a9, *b9;
                assert_int_equal(em_mul_scalar(a, 9.0, &a9), EM_OK);
                assert_int_equal(em_mul_scalar(b, 9.0, &b9), EM_OK);
                em_tensor_release(a), em_tensor_release(b);
                a = a9, b = b9;
            }
            assert_int_equal(em_cast(a, dts[di], &ar), EM_OK);
            assert_int_equal(em_cast(b, dts[di], &br), EM_OK);
            if (trans) {
                assert_int_equal(em_transpose(br, 1, 2, &btr), EM_OK);
            } else {
                btr = br, br = NULL;
            }
            em_tensor *at_, *bt_;
            assert_int_equal(em_to_device(ar, torch_dev, &at_), EM_OK);
            assert_int_equal(em_to_device(btr, torch_dev, &bt_), EM_OK);
            assert_int_equal(em_matmul(at_, bt_, &o), EM_OK);
            assert_int_equal(em_matmul(ar, btr, &orf), EM_OK);
            assert_int_equal(em_to_device(o, ref_dev, &oc), EM_OK);
            const int64_t n = 3 * 37 * 129;
            double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
            em_tensor *xd, *yd;
            assert_int_equal(em_cast(oc, EM_F64, &xd), EM_OK);
            assert_int_equal(em_cast(orf, EM_F64, &yd), EM_OK);
            assert_int_equal(em_tensor_to_data(xd, x, n * sizeof *x), EM_OK);
            assert_int_equal(em_tensor_to_data(yd, y, n * sizeof *y), EM_OK);
            const double tol = dts[di] == EM_F16 ? 2e-2 : dts[di] == EM_F32 ? 1e-4 : 0;
            for (int64_t i = 0; i < n; i++) {
                double d = x[i] - y[i], m = y[i] < 0 ? -y[i] : y[i];
                if (d < 0) d = -d;
                if (!(d <= tol * (1 + m))) {
                    printf("dtype %d trans %d element %lld: torch %.9g ref %.9g\n", (int)dts[di],
                           trans, (long long)i, x[i], y[i]);
                    fail();
                }
            }
            free(x), free(y);
            em_tensor *all[] = {a, b, ar, br, btr, at_, bt_, o, orf, oc, xd, yd};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                if (all[i]) em_tensor_release(all[i]);
        }
    }
    if (blas_get) assert_int_equal(blas_get(), blas_before);
}

int main(void) {
    if (em_device_parse("torch", &torch_dev) != EM_OK) {
        printf("test_torch: SKIP: %s\n", em_last_error());
        return 77;
    }
    assert_int_equal(em_device_parse("cpu", &cpu_dev), EM_OK);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_native_slots),
        cmocka_unit_test(test_to_device_zero_copy),
        cmocka_unit_test(test_torch_error_is_status),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_split_products),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
