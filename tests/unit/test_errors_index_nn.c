/*
 * test_errors_index_nn.c — bad inputs to the indexing ops (gather, scatter_add, index_select,
 * one_hot, sort, argsort, topk) and the neural ops (convolutions, pooling, embedding,
 * layer_norm, dropout, cross_entropy).
 */
#include "errcheck.h"

/* ---- indexing ---- */

static void test_gather_scatter(void **state) {
    (void)state;
    em_device fake = fake_dev();
    em_tensor *x = mk2(EM_F32, 2, 3), *q = mk2(EM_Q8, 2, 3);
    int64_t s22[2] = {2, 2}, s32[2] = {3, 2}, s2[1] = {2};
    int64_t good[4] = {0, 2, 1, 0}, hi[4] = {0, 3, 1, 0}, neg[4] = {0, -1, 1, 0};
    int64_t six[6] = {0, 1, 2, 0, 1, 2};
    em_tensor *idx = mk_idx(good, s22, 2), *idx_hi = mk_idx(hi, s22, 2);
    em_tensor *idx_neg = mk_idx(neg, s22, 2), *idx1 = mk_idx(good, s2, 1);
    em_tensor *idx32 = mk_idx(six, s32, 2);
    em_tensor *idx_f = mk2(EM_F32, 2, 2), *idx_b = mk2(EM_BOOL, 2, 2), *idx_i16 = mk2(EM_I16, 2, 2);
    em_tensor *idx_fake = NULL;
    assert_int_equal(em_tensor_from_data(good, EM_I64, s22, 2, fake, &idx_fake), EM_OK);

    const char *fn = "em_gather";
    EXPECT_ERR(EM_ERR_ARG, fn, em_gather(NULL, 1, idx, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_gather(x, 1, NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_gather(x, 1, idx, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_gather(x, 1, idx_f, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_gather(x, 1, idx_b, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_gather(x, 1, idx_i16, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_gather(q, 1, idx, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_gather(x, 1, idx_hi, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_gather(x, 1, idx_neg, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_gather(x, 2, idx, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_gather(x, 1, idx1, &o));  /* index rank 1 vs 2 */
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_gather(x, 1, idx32, &o)); /* index dim 0: 3 > 2 */
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_gather(x, 1, idx_fake, &o));

    fn = "em_scatter_add";
    em_tensor *src = mk2(EM_F32, 2, 2), *src64 = mk2(EM_F64, 2, 2), *src_small = mk2(EM_F32, 1, 2);
    em_tensor *src_fake = mk_on(fake, EM_F32, s22, 2);
    EXPECT_ERR(EM_ERR_ARG, fn, em_scatter_add(NULL, 1, idx, src, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_scatter_add(x, 1, NULL, src, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_scatter_add(x, 1, idx, NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_scatter_add(x, 1, idx, src, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_scatter_add(x, 1, idx, src64, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_scatter_add(x, 1, idx_f, src, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_scatter_add(x, 1, idx_hi, src, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_scatter_add(x, 1, idx_neg, src, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_scatter_add(x, -3, idx, src, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_scatter_add(x, 1, idx, src_small, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_scatter_add(x, 1, idx, src_fake, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_scatter_add(x, 1, idx_fake, src, &o));

    em_tensor *all[] = {x, q, idx, idx_hi, idx_neg, idx1, idx32, idx_f, idx_b, idx_i16,
                        idx_fake, src, src64, src_small, src_fake};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    CHECKS_DONE();
}

static void test_index_select_one_hot(void **state) {
    (void)state;
    em_device fake = fake_dev();
    em_tensor *x = mk2(EM_F32, 2, 3);
    int64_t s2[1] = {2}, s11[2] = {1, 1}, s4[1] = {4};
    int64_t good[2] = {2, 0}, hi[2] = {3, 0}, neg[2] = {-1, 0};
    em_tensor *idx = mk_idx(good, s2, 1), *idx_hi = mk_idx(hi, s2, 1), *idx_neg = mk_idx(neg, s2, 1);
    em_tensor *idx2d = mk_idx(good, s11, 2), *idx_f = mk1(EM_F32, 2);
    em_tensor *idx_fake = NULL;
    assert_int_equal(em_tensor_from_data(good, EM_I64, s2, 1, fake, &idx_fake), EM_OK);

    const char *fn = "em_index_select";
    EXPECT_ERR(EM_ERR_ARG, fn, em_index_select(NULL, 1, idx, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_index_select(x, 1, NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_index_select(x, 1, idx, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_index_select(x, 1, idx_f, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_index_select(x, 1, idx2d, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_index_select(x, 1, idx_hi, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_index_select(x, 1, idx_neg, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_index_select(x, 2, idx, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_index_select(x, 1, idx_fake, &o));

    fn = "em_one_hot";
    em_tensor *idx_b = mk1(EM_BOOL, 2), *idx4 = mk_idx((int64_t[4]){0, 1, 2, 0}, s4, 1);
    EXPECT_ERR(EM_ERR_ARG, fn, em_one_hot(NULL, 3, EM_F32, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_one_hot(idx, 3, EM_F32, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_one_hot(idx_f, 3, EM_F32, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_one_hot(idx_b, 3, EM_F32, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_one_hot(idx, 3, EM_Q8, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_one_hot(idx, 0, EM_F32, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_one_hot(idx, -1, EM_F32, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_one_hot(idx, 2, EM_F32, &o)); /* index 2 >= 2 classes */
    EXPECT_ERR(EM_ERR_ARG, fn, em_one_hot(idx_neg, 3, EM_F32, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_one_hot(idx4, INT64_C(1) << 62, EM_F32, &o));

    em_tensor *all[] = {x, idx, idx_hi, idx_neg, idx2d, idx_f, idx_fake, idx_b, idx4};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    CHECKS_DONE();
}

static void test_sort_topk(void **state) {
    (void)state;
    em_tensor *x = mk2(EM_F32, 2, 3), *q = mk2(EM_Q8, 2, 3);
    const char *fn = "em_sort";
    EXPECT_ERR(EM_ERR_ARG, fn, em_sort(NULL, 1, false, &o, &o2));
    EXPECT_ERR(EM_ERR_ARG, fn, em_sort(x, 2, false, &o, &o2));
    EXPECT_ERR(EM_ERR_ARG, fn, em_sort(x, -3, true, &o, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_sort(q, 1, false, &o, &o2));

    fn = "em_argsort";
    EXPECT_ERR(EM_ERR_ARG, fn, em_argsort(NULL, 1, false, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_argsort(x, 1, false, NULL));
    EXPECT_ERR(EM_ERR_ARG, fn, em_argsort(x, 2, false, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_argsort(q, 1, false, &o));

    fn = "em_topk";
    EXPECT_ERR(EM_ERR_ARG, fn, em_topk(NULL, 1, 1, true, &o, &o2));
    EXPECT_ERR(EM_ERR_ARG, fn, em_topk(x, 4, 1, true, &o, &o2)); /* k > 3 */
    EXPECT_ERR(EM_ERR_ARG, fn, em_topk(x, -1, 1, true, &o, &o2));
    EXPECT_ERR(EM_ERR_ARG, fn, em_topk(x, 1, 2, true, &o, &o2));
    EXPECT_ERR(EM_ERR_ARG, fn, em_topk(x, 1, -3, false, NULL, &o2));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_topk(q, 1, 1, true, &o, &o2));
    em_tensor_release(x);
    em_tensor_release(q);
    CHECKS_DONE();
}

/* ---- neural ---- */

static void test_conv(void **state) {
    (void)state;
    em_device fake = fake_dev();
    em_conv_params p = em_conv_params_default();
    em_tensor *x = mk4(EM_F32, 1, 2, 5, 5), *w = mk4(EM_F32, 4, 2, 3, 3), *b = mk1(EM_F32, 4);
    em_tensor *xi = mk4(EM_I64, 1, 2, 5, 5), *wi = mk4(EM_I64, 4, 2, 3, 3);
    em_tensor *w64 = mk4(EM_F64, 4, 2, 3, 3), *b64 = mk1(EM_F64, 4), *b3 = mk1(EM_F32, 3);
    em_tensor *x3 = mk3(EM_F32, 1, 2, 5), *w3 = mk3(EM_F32, 4, 2, 3);
    em_tensor *wc = mk4(EM_F32, 4, 3, 3, 3), *wbig = mk4(EM_F32, 4, 2, 7, 7);
    int64_t ws[4] = {4, 2, 3, 3};
    em_tensor *wf = mk_on(fake, EM_F32, ws, 4);

    const char *fn = "em_conv2d";
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv2d(NULL, w, b, &p, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv2d(x, NULL, b, &p, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv2d(x, w, b, &p, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_conv2d(xi, wi, NULL, &p, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_conv2d(x, w64, NULL, &p, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_conv2d(x, w, b64, &p, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_conv2d(x3, w, b, &p, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_conv2d(x, w3, b, &p, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_conv2d(x, wc, b, &p, &o));   /* 2 channels vs 3 */
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_conv2d(x, w, b3, &p, &o));   /* bias 3 vs 4 outputs */
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_conv2d(x, wbig, b, &p, &o)); /* 7x7 kernel, 5x5 input */
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_conv2d(x, wf, b, &p, &o));
    em_conv_params bad = p;
    bad.stride[0] = 0;
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv2d(x, w, b, &bad, &o));
    bad = p;
    bad.dilation[1] = 0;
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv2d(x, w, b, &bad, &o));
    bad = p;
    bad.padding[0] = -1;
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv2d(x, w, b, &bad, &o));
    bad = p;
    bad.groups = 0;
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv2d(x, w, b, &bad, &o));

    fn = "em_conv1d";
    em_tensor *w1c = mk3(EM_F32, 4, 3, 3), *x1i = mk3(EM_I64, 1, 2, 5), *w1i = mk3(EM_I64, 4, 2, 3);
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv1d(NULL, w3, b, &p, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv1d(x3, NULL, b, &p, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv1d(x3, w3, b, &p, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_conv1d(x1i, w1i, NULL, &p, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_conv1d(x, w3, b, &p, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_conv1d(x3, w1c, b, &p, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_conv1d(x3, w3, b3, &p, &o));
    bad = p;
    bad.stride[0] = 0;
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv1d(x3, w3, b, &bad, &o));

    fn = "em_conv_transpose2d";
    em_tensor *wt = mk4(EM_F32, 2, 4, 3, 3), *wtc = mk4(EM_F32, 3, 4, 3, 3);
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv_transpose2d(NULL, wt, b, &p, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv_transpose2d(x, NULL, b, &p, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv_transpose2d(x, wt, b, &p, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_conv_transpose2d(xi, wi, NULL, &p, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_conv_transpose2d(x, wtc, b, &p, &o)); /* in-channels 3 vs 2 */
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_conv_transpose2d(x, wt, b3, &p, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_conv_transpose2d(x3, wt, b, &p, &o));
    bad = p;
    bad.stride[1] = 0;
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv_transpose2d(x, wt, b, &bad, &o));
    bad = p;
    bad.output_padding[0] = 1; /* must be smaller than stride (1) or dilation (1) */
    EXPECT_ERR(EM_ERR_ARG, fn, em_conv_transpose2d(x, wt, b, &bad, &o));

    em_tensor *all[] = {x, w, b, xi, wi, w64, b64, b3, x3, w3, wc, wbig, wf, w1c, x1i, w1i, wt, wtc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    CHECKS_DONE();
}

static void test_pool(void **state) {
    (void)state;
    em_tensor *x = mk4(EM_F32, 1, 2, 4, 4), *xi = mk4(EM_I64, 1, 2, 4, 4);
    em_tensor *x3 = mk3(EM_F32, 2, 4, 4);
    em_pool_params p = {{2, 2}, {0, 0}, {0, 0}, {0, 0}, false, false};
    em_pool_params bad;
    for (int which = 0; which < 2; which++) {
        const char *fn = which ? "em_avg_pool2d" : "em_max_pool2d";
#define POOL(xx, pp, out) (which ? em_avg_pool2d(xx, pp, out) : em_max_pool2d(xx, pp, out, NULL))
        EXPECT_ERR(EM_ERR_ARG, fn, POOL(NULL, &p, &o));
        EXPECT_ERR(EM_ERR_ARG, fn, POOL(x, NULL, &o));
        EXPECT_ERR(EM_ERR_ARG, fn, POOL(x, &p, NULL));
        EXPECT_ERR(EM_ERR_DTYPE, fn, POOL(xi, &p, &o));
        EXPECT_ERR(EM_ERR_SHAPE, fn, POOL(x3, &p, &o));
        bad = p;
        bad.kernel[0] = 0;
        EXPECT_ERR(EM_ERR_ARG, fn, POOL(x, &bad, &o));
        bad = p;
        bad.stride[1] = -1;
        EXPECT_ERR(EM_ERR_ARG, fn, POOL(x, &bad, &o));
        bad = p;
        bad.padding[0] = 2; /* more than half the kernel */
        EXPECT_ERR(EM_ERR_ARG, fn, POOL(x, &bad, &o));
        bad = p;
        bad.kernel[0] = bad.kernel[1] = 5; /* larger than the 4x4 input */
        EXPECT_ERR(EM_ERR_SHAPE, fn, POOL(x, &bad, &o));
#undef POOL
    }
    EXPECT_ERR(EM_ERR_ARG, "em_max_pool2d", em_max_pool2d(x, &p, NULL, &o2));

    const char *fn = "em_adaptive_avg_pool2d";
    EXPECT_ERR(EM_ERR_ARG, fn, em_adaptive_avg_pool2d(NULL, 2, 2, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_adaptive_avg_pool2d(x, 2, 2, NULL));
    EXPECT_ERR(EM_ERR_ARG, fn, em_adaptive_avg_pool2d(x, 0, 2, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_adaptive_avg_pool2d(x, 2, -1, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_adaptive_avg_pool2d(xi, 2, 2, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_adaptive_avg_pool2d(x3, 2, 2, &o));
    em_tensor_release(x);
    em_tensor_release(xi);
    em_tensor_release(x3);
    CHECKS_DONE();
}

static void test_embedding_layer_norm_dropout(void **state) {
    (void)state;
    em_device fake = fake_dev();
    em_tensor *wt = mk2(EM_F32, 5, 3), *w1 = mk1(EM_F32, 5);
    int64_t s2[1] = {2};
    int64_t good[2] = {4, 0}, hi[2] = {5, 0}, neg[2] = {-1, 0};
    em_tensor *idx = mk_idx(good, s2, 1), *idx_hi = mk_idx(hi, s2, 1), *idx_neg = mk_idx(neg, s2, 1);
    em_tensor *idx_f = mk1(EM_F32, 2), *idx_fake = NULL;
    assert_int_equal(em_tensor_from_data(good, EM_I64, s2, 1, fake, &idx_fake), EM_OK);
    const char *fn = "em_embedding";
    EXPECT_ERR(EM_ERR_ARG, fn, em_embedding(NULL, idx, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_embedding(wt, NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_embedding(wt, idx, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_embedding(wt, idx_f, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_embedding(w1, idx, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_embedding(wt, idx_hi, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_embedding(wt, idx_neg, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_embedding(wt, idx_fake, &o));

    fn = "em_layer_norm";
    int64_t s3[1] = {3};
    em_tensor *x = mk2(EM_F32, 2, 3), *xi = mk2(EM_I64, 2, 3), *g = mk1(EM_F32, 3);
    em_tensor *g4 = mk1(EM_F32, 4), *g64 = mk1(EM_F64, 3), *gf = mk_on(fake, EM_F32, s3, 1);
    EXPECT_ERR(EM_ERR_ARG, fn, em_layer_norm(NULL, 1, g, g, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_layer_norm(x, 1, g, g, 1e-5, NULL));
    EXPECT_ERR(EM_ERR_ARG, fn, em_layer_norm(x, 0, g, g, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_layer_norm(x, 3, NULL, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_layer_norm(x, -1, NULL, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_layer_norm(xi, 1, NULL, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_layer_norm(x, 1, g64, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_layer_norm(x, 1, g4, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_layer_norm(x, 1, NULL, g4, 1e-5, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_layer_norm(x, 1, gf, NULL, 1e-5, &o));

    fn = "em_dropout";
    EXPECT_ERR(EM_ERR_ARG, fn, em_dropout(NULL, 0.5, true, 1, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_dropout(x, 0.5, true, 1, NULL));
    EXPECT_ERR(EM_ERR_ARG, fn, em_dropout(x, -0.1, true, 1, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_dropout(x, 1.5, true, 1, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_dropout(x, NAN, true, 1, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_dropout(xi, 0.5, true, 1, &o));

    em_tensor *all[] = {wt, w1, idx, idx_hi, idx_neg, idx_f, idx_fake, x, xi, g, g4, g64, gf};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    CHECKS_DONE();
}

static void test_cross_entropy(void **state) {
    (void)state;
    em_device fake = fake_dev();
    const char *fn = "em_cross_entropy";
    int64_t s2[1] = {2}, s3[1] = {3};
    int64_t good[3] = {2, 0, 1}, hi[2] = {3, 0}, neg[2] = {-1, 0};
    em_tensor *lg = mk2(EM_F32, 2, 3), *lgi = mk2(EM_I64, 2, 3), *lg1 = mk1(EM_F32, 3);
    em_tensor *t = mk_idx(good, s2, 1), *t3 = mk_idx(good, s3, 1);
    em_tensor *t_hi = mk_idx(hi, s2, 1), *t_neg = mk_idx(neg, s2, 1), *tb = mk1(EM_BOOL, 2);
    em_tensor *pr = mk2(EM_F32, 2, 3), *pr64 = mk2(EM_F64, 2, 3), *pr24 = mk2(EM_F32, 2, 4);
    em_tensor *tf = NULL;
    assert_int_equal(em_tensor_from_data(good, EM_I64, s2, 1, fake, &tf), EM_OK);
    EXPECT_ERR(EM_ERR_ARG, fn, em_cross_entropy(NULL, t, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_cross_entropy(lg, NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_cross_entropy(lg, t, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_cross_entropy(lgi, t, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_cross_entropy(lg, tb, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_cross_entropy(lg, pr64, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_cross_entropy(lg1, t, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_cross_entropy(lg, t3, &o));  /* N 2 vs 3 */
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_cross_entropy(lg, pr24, &o)); /* probs [2,4] vs [2,3] */
    EXPECT_ERR(EM_ERR_ARG, fn, em_cross_entropy(lg, t_hi, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_cross_entropy(lg, t_neg, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_cross_entropy(lg, tf, &o));
    em_tensor *ok = NULL;
    CHECK(em_cross_entropy(lg, pr, &ok) == EM_OK, "em_cross_entropy with probabilities");
    em_tensor_release(ok);

    em_tensor *all[] = {lg, lgi, lg1, t, t3, t_hi, t_neg, tb, pr, pr64, pr24, tf};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    CHECKS_DONE();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gather_scatter),
        cmocka_unit_test(test_index_select_one_hot),
        cmocka_unit_test(test_sort_topk),
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_embedding_layer_norm_dropout),
        cmocka_unit_test(test_cross_entropy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
