/* matmul.c — the cpu backend's matmul: f32 and f64 through OpenBLAS (CBLAS), f16 and bf16
 * through f32 copies; batches loop over the broadcast batch dims; integer matmul goes to the
 * ref kernel. A transposed operand (unit stride on its row dim) is passed to BLAS as
 * transposed rather than copied. */
#include <cblas.h>
#include <string.h>

#include "cpu.h"

/* How BLAS reads the last two dims of v: row-major (`ld` = row stride) or transposed. */
static bool blas_layout(const em_view *v, CBLAS_TRANSPOSE *t, int64_t *ld) {
    int r = v->rank;
    int64_t rows = v->shape[r - 2], cols = v->shape[r - 1];
    int64_t sr = v->strides[r - 2], sc = v->strides[r - 1];
    int64_t rmax = rows > 1 ? rows : 1, cmax = cols > 1 ? cols : 1;
    if ((cols == 1 || sc == 1) && (rows == 1 || sr >= cmax)) {
        *t = CblasNoTrans;
        *ld = rows == 1 ? cmax : sr;
        return true;
    }
    if ((rows == 1 || sr == 1) && (cols == 1 || sc >= rmax)) {
        *t = CblasTrans;
        *ld = cols == 1 ? rmax : sc;
        return true;
    }
    return false;
}

/* Offsets (in elements) of batch item `bi` of a and b. */
static void batch_offsets(const em_view *out, const em_view *a, const em_view *b, int64_t bi,
                          int64_t *oa, int64_t *ob) {
    *oa = a->offset;
    *ob = b->offset;
    for (int d = out->rank - 3; d >= 0; d--) {
        int64_t idx = bi % out->shape[d];
        bi /= out->shape[d];
        *oa += idx * a->strides[d];
        *ob += idx * b->strides[d];
    }
}

/* A copy of v's elements (any dtype among f32/f16/bf16) as contiguous f32. */
static em_status to_f32(const em_view *v, em_view *f, void **tmp) {
    *f = *v;
    f->dtype = EM_F32;
    f->offset = 0;
    int64_t s = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        f->strides[d] = s;
        s *= v->shape[d];
    }
    *tmp = cpu_scratch((size_t)s * sizeof(float));
    if (!*tmp) return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory");
    f->buf = *tmp;
    em_status st = cpu_ref()->copy(NULL, f, v);
    if (st != EM_OK) cpu_scratch_free(*tmp);
    return st;
}

static em_status matmul_blas(const em_view *out, const em_view *a, const em_view *b) {
    int r = out->rank;
    int64_t m = out->shape[r - 2], n = out->shape[r - 1], k = a->shape[r - 1];
    int64_t batch = 1;
    for (int d = 0; d < r - 2; d++) batch *= out->shape[d];
    em_view ca = *a, cb = *b;
    void *ta = NULL, *tb = NULL;
    CBLAS_TRANSPOSE tra = CblasNoTrans, trb = CblasNoTrans;
    int64_t lda = 1, ldb = 1;
    em_status s = EM_OK;
    if (!blas_layout(a, &tra, &lda)) s = cpu_contig_input(a, &ca, &ta);
    if (s == EM_OK && !blas_layout(b, &trb, &ldb)) s = cpu_contig_input(b, &cb, &tb);
    if (s == EM_OK) {
        blas_layout(&ca, &tra, &lda);
        blas_layout(&cb, &trb, &ldb);
    }
    size_t sz = em_dtype_size(out->dtype);
    char *o = (char *)out->buf + out->offset * (int64_t)sz;
    for (int64_t bi = 0; s == EM_OK && bi < batch; bi++) {
        int64_t oa, ob;
        batch_offsets(out, &ca, &cb, bi, &oa, &ob);
        char *pa = (char *)ca.buf + oa * (int64_t)sz, *pb = (char *)cb.buf + ob * (int64_t)sz;
        char *po = o + bi * m * n * (int64_t)sz;
        if (k == 0) {
            memset(po, 0, (size_t)(m * n) * sz);
            continue;
        }
        if (out->dtype == EM_F32)
            cblas_sgemm(CblasRowMajor, tra, trb, (blasint)m, (blasint)n, (blasint)k, 1.0f,
                        (const float *)pa, (blasint)lda, (const float *)pb, (blasint)ldb, 0.0f,
                        (float *)po, (blasint)n);
        else
            cblas_dgemm(CblasRowMajor, tra, trb, (blasint)m, (blasint)n, (blasint)k, 1.0,
                        (const double *)pa, (blasint)lda, (const double *)pb, (blasint)ldb, 0.0,
                        (double *)po, (blasint)n);
    }
    if (ta) cpu_scratch_free(ta);
    if (tb) cpu_scratch_free(tb);
    return s;
}

em_status cpu_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b) {
    if (out->rank < 2 || !cpu_contiguous(out))
        return cpu_ref()->matmul(ctx, out, a, b);
    if (out->dtype == EM_F32 || out->dtype == EM_F64) return matmul_blas(out, a, b);
    if (out->dtype == EM_F16 || out->dtype == EM_BF16) {
        /* through f32: convert the operands, multiply, round the result once */
        em_view fa, fb, fo = *out;
        void *ta = NULL, *tb = NULL, *to = NULL;
        em_status s = to_f32(a, &fa, &ta);
        if (s == EM_OK) s = to_f32(b, &fb, &tb);
        if (s == EM_OK) {
            to = cpu_scratch((size_t)cpu_numel(out) * sizeof(float));
            if (!to) s = em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory");
        }
        if (s == EM_OK) {
            fo.dtype = EM_F32;
            fo.buf = to;
            fo.offset = 0;
            s = matmul_blas(&fo, &fa, &fb);
        }
        if (s == EM_OK) s = cpu_ref()->copy(ctx, out, &fo);
        if (ta) cpu_scratch_free(ta);
        if (tb) cpu_scratch_free(tb);
        if (to) cpu_scratch_free(to);
        return s;
    }
    return cpu_ref()->matmul(ctx, out, a, b);
}
