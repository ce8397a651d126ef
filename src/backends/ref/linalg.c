/*
 * linalg.c — the reference backend's matrix product.
 *
 * out [..., m, n] = a [..., m, k] @ b [..., k, n]; a and b come with out's rank and its batch
 * dims already broadcast (stride 0). Floats accumulate in double and round on store; ints
 * accumulate in int64 (wrapping) and wrap to the output's width on store.
 */
#include "ref.h"

/** Element offsets of batch number `lin` (row-major over out's batch dims) in out, a, b. */
static void batch_offsets(const em_view *out, const em_view *a, const em_view *b, int64_t lin,
                          int64_t *oo, int64_t *ao, int64_t *bo) {
    *oo = out->offset;
    *ao = a->offset;
    *bo = b->offset;
    for (int d = out->rank - 3; d >= 0; d--) {
        int64_t s = out->shape[d], i = lin % s;
        lin /= s;
        *oo += i * out->strides[d];
        *ao += i * a->strides[d];
        *bo += i * b->strides[d];
    }
}

/** One [m, k] @ [k, n] product in double, for f32 and f64 directly, other floats via ref_ld. */
static void mm_float(const em_view *out, const em_view *a, const em_view *b, int64_t oo,
                     int64_t ao, int64_t bo, int64_t m, int64_t n, int64_t k) {
    int r = out->rank;
    int64_t osm = out->strides[r - 2], osn = out->strides[r - 1];
    int64_t asm_ = a->strides[r - 2], ask = a->strides[r - 1];
    int64_t bsk = b->strides[r - 2], bsn = b->strides[r - 1];
    em_dtype dt = a->dtype;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            int64_t ap = ao + i * asm_, bp = bo + j * bsn;
            if (dt == EM_F32) {
                const float *A = a->buf, *B = b->buf;
                for (int64_t p = 0; p < k; p++) acc += (double)A[ap + p * ask] * B[bp + p * bsk];
            } else if (dt == EM_F64) {
                const double *A = a->buf, *B = b->buf;
                for (int64_t p = 0; p < k; p++) acc += A[ap + p * ask] * B[bp + p * bsk];
            } else {
                for (int64_t p = 0; p < k; p++)
                    acc += ref_ld(a->buf, dt, ap + p * ask) * ref_ld(b->buf, dt, bp + p * bsk);
            }
            ref_st(out->buf, out->dtype, oo + i * osm + j * osn, acc);
        }
    }
}

/** One [m, k] @ [k, n] product in wrapping int64. */
static void mm_int(const em_view *out, const em_view *a, const em_view *b, int64_t oo,
                   int64_t ao, int64_t bo, int64_t m, int64_t n, int64_t k) {
    int r = out->rank;
    int64_t osm = out->strides[r - 2], osn = out->strides[r - 1];
    int64_t asm_ = a->strides[r - 2], ask = a->strides[r - 1];
    int64_t bsk = b->strides[r - 2], bsn = b->strides[r - 1];
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            uint64_t acc = 0;
            int64_t ap = ao + i * asm_, bp = bo + j * bsn;
            for (int64_t p = 0; p < k; p++)
                acc += (uint64_t)ref_ldi(a->buf, a->dtype, ap + p * ask) *
                       (uint64_t)ref_ldi(b->buf, b->dtype, bp + p * bsk);
            ref_sti(out->buf, out->dtype, oo + i * osm + j * osn, (int64_t)acc);
        }
    }
}

em_status ref_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b) {
    (void)ctx;
    int r = out->rank;
    int64_t m = out->shape[r - 2], n = out->shape[r - 1], k = a->shape[r - 1];
    int64_t batches = 1;
    for (int d = 0; d < r - 2; d++) batches *= out->shape[d];
    int fl = ref_is_float(a->dtype);
    for (int64_t bi = 0; bi < batches; bi++) {
        int64_t oo, ao, bo;
        batch_offsets(out, a, b, bi, &oo, &ao, &bo);
        if (fl)
            mm_float(out, a, b, oo, ao, bo, m, n, k);
        else
            mm_int(out, a, b, oo, ao, bo, m, n, k);
    }
    return EM_OK;
}
