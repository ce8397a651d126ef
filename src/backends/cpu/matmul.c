/* matmul.c — the cpu backend's GEMM and matmul: f32 and f64 through OpenBLAS (CBLAS) or
 * ember's own GEMM (gemm.c; which one: gemm_decide below), f16 and bf16 through f32 copies;
 * batches fold into the rows of one GEMM where b is shared (fold_batch), else loop over the
 * batch dims (small items side by side on the pool); integer matmul
 * goes to the ref kernel. A transposed operand (unit stride on its row dim) is passed to BLAS
 * as transposed rather than copied.
 *
 * Threads: OpenBLAS runs single-threaded (threads.c sets it so) and cpu_gemm splits a large
 * product's rows (or columns, when rows are few) over the backend's own pool. One pool for
 * everything: OpenBLAS's worker threads, which spin for a while after each threaded call,
 * never compete with ours. */
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cpu.h"
#include "stage.h"

char *openblas_get_corename(void);

/* ---- which GEMM: OpenBLAS's or ember's own (gemm.c) ----
 * EMBER_CPU_GEMM (read once, any case):
 *   - unset, empty or `auto`: ember's GEMM, except
 *       - where OpenBLAS runs an AVX-512 kernel (SkylakeX, Cooperlake, SapphireRapids) on an
 *         AVX-512 CPU: OpenBLAS. On a Xeon of family 6 model 207 (OPENBLAS_CORETYPE=Cooperlake
 *         or SkylakeX), ember's AVX-512 copy and OpenBLAS's kernel are within noise of each
 *         other on the models' shapes (ember-bench cpu --gemm: geometric mean 0.96-1.0, but
 *         0.73-0.77 on attention's batched 128 x 32 x 128 products) and on the models' training
 *         steps (ember-models, one thread: GPT 0.92-0.96x, MLP 1.0-1.06x of OpenBLAS's time),
 *         so the fit kernel keeps them;
 *       - where ember's GEMM would run a level without FMA (a CPU without AVX2, or
 *         EMBER_CPU_ISA=portable) and OpenBLAS's kernel fits the CPU: OpenBLAS (not timed);
 *       - and, where OpenBLAS's kernel fits the CPU and ember's GEMM runs the avx2 level,
 *         skinny products (m <= 64 rows of C, n and k >= 256; gemm_ember_for): OpenBLAS;
 *         ember's avx512 level beats OpenBLAS's AVX2 kernels (Haswell, Zen) on those too
 *         (AMD EPYC Zen 5, OPENBLAS_CORETYPE=Haswell, ember-bench cpu --gemm, one thread:
 *         the ResNet's im2col products of 16-64 rows 1.34-1.56x, 64 x 1024 x 1024 1.59x);
 *     because ember's GEMM matches or beats OpenBLAS's AVX2 kernel (Zen, Haswell) on one Zen 3
 *     core: square f32 n = 512..2048 at 0.81-0.83 of the FMA peak (OpenBLAS 0.79-0.84), the
 *     models' GEMM shapes at 0.88-1.26x (geometric mean 1.06; ember-bench cpu's section), conv's
 *     im2col products 1.1-1.17x, but loses 5-20% when C has few rows and B is large (16, 32,
 *     64 x 1024 x 1024: 0.87, 0.90, 0.90), where packing B is not paid back; and any kernel
 *     that is below what this CPU runs (cpu_blas_core_warning: an SSE kernel such as Prescott,
 *     what Debian's OpenBLAS 0.3.21 picks on CPUs it does not know) or needs instructions it
 *     lacks (cpu_blas_core_unrunnable: a forced OPENBLAS_CORETYPE) runs ember's for every shape;
 *   - `ember`: ember's GEMM always;
 *   - `openblas`: OpenBLAS always, unless its kernel cannot run here (then ember's: never
 *     SIGILL);
 *   - anything else: auto.
 * Every choice runs on every CPU: ember's GEMM is the chosen ISA level's (cpu_isa). */
char *openblas_get_corename(void);

static struct {
    pthread_once_t once;
    bool ember, usable, skinny_blas; /* skinny_blas: skinny products go to OpenBLAS */
    char why[320];
} gemm_sel = {.once = PTHREAD_ONCE_INIT};

/* OpenBLAS 0.3.21's x86 kernels that use AVX-512 */
static bool core_is_avx512(const char *core) {
    static const char *const k[] = {"skylakex", "cooperlake", "sapphirerapids"};
    for (size_t i = 0; core && i < sizeof k / sizeof k[0]; i++)
        if (strcasecmp(core, k[i]) == 0) return true;
    return false;
}

static void gemm_decide(void) {
    const char *core = openblas_get_corename(), *env = getenv("EMBER_CPU_GEMM");
    const int best = cpu_isa_best();
    const bool unrunnable = cpu_blas_core_unrunnable(core, best, NULL, 0);
    const bool below = cpu_blas_core_warning(core, best, NULL, 0);
    gemm_sel.usable = !unrunnable;
    char *why = gemm_sel.why;
    const size_t cap = sizeof gemm_sel.why;
    if (!core) core = "?";
    if (env && strcasecmp(env, "ember") == 0) {
        gemm_sel.ember = true;
        snprintf(why, cap, "EMBER_CPU_GEMM=%s", env);
    } else if (env && strcasecmp(env, "openblas") == 0) {
        gemm_sel.ember = unrunnable;
        if (unrunnable)
            snprintf(why, cap, "EMBER_CPU_GEMM=%s, but OpenBLAS's %s kernel needs instructions "
                     "this CPU lacks", env, core);
        else
            snprintf(why, cap, "EMBER_CPU_GEMM=%s", env);
    } else {
        char how[96] = "auto";
        if (env && *env && strcasecmp(env, "auto") != 0)
            snprintf(how, sizeof how, "auto: EMBER_CPU_GEMM=%.24s is not auto, openblas or ember",
                     env);
        const bool blas512 = !unrunnable && !below && core_is_avx512(core) &&
                             best >= CPU_ISA_AVX512;
        /* ember's GEMM at a level without FMA (the CPU's, or EMBER_CPU_ISA=portable): not
         * timed against OpenBLAS, which keeps the fit kernel's products */
        const bool sse = cpu_isa() < CPU_ISA_AVX2;
        gemm_sel.ember = unrunnable || below || (!blas512 && !sse);
        /* skinny products: OpenBLAS's where its kernel is as wide as ember's level (an AVX2
         * kernel against ember's avx2); ember's avx512 level beats an AVX2 kernel on them */
        const bool wider = cpu_isa() >= CPU_ISA_AVX512;
        gemm_sel.skinny_blas = !unrunnable && !below && !blas512 && !sse && !wider;
        if (unrunnable)
            snprintf(why, cap, "%s: OpenBLAS runs %s, which this CPU (%s) cannot run", how,
                     core, cpu_isa_name(best));
        else if (below)
            snprintf(why, cap, "%s: OpenBLAS runs %s, below this CPU's %s", how, core,
                     cpu_isa_name(best));
        else if (blas512)
            snprintf(why, cap, "%s: OpenBLAS runs %s, an AVX-512 kernel, as fast as ember's "
                     "GEMM on this CPU's level", how, core);
        else if (sse)
            snprintf(why, cap, "%s: OpenBLAS runs %s, fit for this CPU (%s); ember's GEMM "
                     "would run at level %s", how, core, cpu_isa_name(best),
                     cpu_isa_name(cpu_isa()));
        else if (wider)
            snprintf(why, cap, "%s: ember's %s GEMM beats OpenBLAS's %s kernel (AVX2) on this "
                     "CPU, skinny products included", how, cpu_isa_name(cpu_isa()), core);
        else
            snprintf(why, cap, "%s: ember's GEMM matches or beats OpenBLAS's %s kernel on this "
                     "CPU (%s); OpenBLAS for products of m <= 64 rows with n, k >= 256", how,
                     core, cpu_isa_name(best));
    }
}

/* The GEMM of one product of op(A) m x k by op(B) k x n: ember's or OpenBLAS's. */
static bool gemm_ember_for(int64_t m, int64_t n, int64_t k) {
    pthread_once(&gemm_sel.once, gemm_decide);
    if (!gemm_sel.ember) return false;
    return !(gemm_sel.skinny_blas && m <= 64 && n >= 256 && k >= 256);
}

bool cpu_gemm_ember_for(int64_t m, int64_t n, int64_t k) { return gemm_ember_for(m, n, k); }

bool cpu_blas_usable(void) {
    pthread_once(&gemm_sel.once, gemm_decide);
    return gemm_sel.usable;
}

bool cpu_gemm_is_ember(void) {
    pthread_once(&gemm_sel.once, gemm_decide);
    return gemm_sel.ember;
}

void cpu_gemm_describe(char *buf, size_t cap) {
    const cpu_kernels *k = cpu_kernels_of(cpu_isa());
    if (cpu_gemm_is_ember())
        snprintf(buf, cap, "ember %s %dx%d (%s)", cpu_isa_name(k->isa), k->gemm_mr, k->gemm_nr,
                 gemm_sel.why);
    else
        snprintf(buf, cap, "openblas %s (%s)", openblas_get_corename(), gemm_sel.why);
}

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

/* A copy of v's elements (any dtype among f32/f16/bf16) as contiguous f32, but for its
 * broadcast dims (stride 0), copied once and left stride 0: a weight shared by a batch stays
 * one matrix, which fold_batch then folds. */
static em_status to_f32(const em_view *v, em_view *f, void **tmp) {
    em_view src = *v;
    for (int d = 0; d < v->rank; d++)
        if (v->strides[d] == 0 && v->shape[d] > 1) src.shape[d] = 1;
    *f = src;
    f->dtype = EM_F32;
    f->offset = 0;
    int64_t s = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        f->strides[d] = s;
        s *= src.shape[d];
    }
    *tmp = cpu_scratch((size_t)s * sizeof(float));
    if (!*tmp) return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory");
    f->buf = *tmp;
    em_status st = cpu_copy(NULL, f, &src);
    if (st != EM_OK) {
        cpu_scratch_free(*tmp);
        return st;
    }
    for (int d = 0; d < v->rank; d++)
        if (src.shape[d] != v->shape[d]) {
            f->shape[d] = v->shape[d];
            f->strides[d] = 0;
        }
    return EM_OK;
}

typedef struct gemm_job {
    em_dtype dt;
    CBLAS_TRANSPOSE ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    const char *a, *b;
    char *c;
    double beta;
    bool split_n; /* split the columns of C (when it has few rows) instead of its rows */
    bool ember;   /* ember's GEMM (gemm_ember_for the whole product), else OpenBLAS */
} gemm_job;

static void gemm_range(int64_t lo, int64_t hi, void *arg) {
    const gemm_job *j = arg;
    size_t sz = em_dtype_size(j->dt);
    const char *a = j->a, *b = j->b;
    char *c = j->c;
    int64_t m = j->m, n = j->n;
    if (j->split_n) { /* columns lo..hi: of B (row-major: column offset, or row if transposed) */
        b += (j->tb == CblasNoTrans ? lo : lo * j->ldb) * (int64_t)sz;
        c += lo * (int64_t)sz;
        n = hi - lo;
    } else { /* rows lo..hi: of A */
        a += (j->ta == CblasNoTrans ? lo * j->lda : lo) * (int64_t)sz;
        c += lo * j->ldc * (int64_t)sz;
        m = hi - lo;
    }
    if (j->ember)
        cpu_kernels_of(cpu_isa())->gemm(j->dt, j->ta != CblasNoTrans, j->tb != CblasNoTrans, m, n,
                                        j->k, a, j->lda, b, j->ldb, j->beta, c, j->ldc);
    else if (j->dt == EM_F32)
        cblas_sgemm(CblasRowMajor, j->ta, j->tb, (blasint)m, (blasint)n, (blasint)j->k, 1.0f,
                    (const float *)a, (blasint)j->lda, (const float *)b, (blasint)j->ldb,
                    (float)j->beta, (float *)c, (blasint)j->ldc);
    else
        cblas_dgemm(CblasRowMajor, j->ta, j->tb, (blasint)m, (blasint)n, (blasint)j->k, 1.0,
                    (const double *)a, (blasint)j->lda, (const double *)b, (blasint)j->ldb,
                    j->beta, (double *)c, (blasint)j->ldc);
}

void cpu_gemm(em_dtype dt, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
              int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
              void *c, int64_t ldc) {
    gemm_job j = {dt, ta, tb, m, n, k, lda, ldb, ldc, a, b, c, beta, false,
                  gemm_ember_for(m, n, k)};
    /* below about a million multiply-adds a thread's share is not worth the wake-up */
    double work = (double)m * (double)n * (double)k;
    int nt = cpu_threads();
    if (nt == 1 || work < (1 << 20)) {
        gemm_range(0, m, &j);
        return;
    }
    /* rows in blocks of 16 (what BLAS kernels tile by; 48 for ember's, a multiple of its tile
     * rows at every level), columns when rows are few. Every chunk packs all of the operand
     * that is not split: with ember's GEMM and few rows (m <= 256, fewer than the columns:
     * the MLP's 128 x 1024 x 1024), op(A) is the cheaper to pack again, so columns, one chunk
     * a thread (rows would pack all of B once a chunk) */
    const bool wide = j.ember && m <= 256 && m < n && n >= 64 * nt;
    j.split_n = (m < 16 * nt && n >= 64 * nt) || wide;
    int64_t total = j.split_n ? n : m, unit = j.split_n ? 64 : j.ember ? 48 : 16;
    int64_t grain = (total + 4 * nt - 1) / (4 * nt); /* several chunks a thread: balance */
    grain = (grain + unit - 1) / unit * unit;
    if (wide) grain = n / nt / 64 * 64 > 64 ? n / nt / 64 * 64 : 64;
    cpu_parallel_for(total, grain, gemm_range, &j);
}

/* Batch folding: out[..., m, n] = a[..., m, k] @ b[k, n] for every batch item, with b the same
 * matrix for each (stride 0 over the batch: nn.Linear's x @ W^T on [B, T, C]) and a's batch
 * and row dims one uniformly strided dim, is one GEMM of batch * m rows (out is contiguous, so
 * its rows follow each other across the batch). Folds the innermost batch dims that allow it
 * (rank 4 with b broadcast over dim 1 only folds dim 1 and loops over dim 0); rewrites out, a
 * and b (their batch dims 0 .. f - 1 kept, then the folded matrix) and returns the new rank,
 * or 0 when no dim folds. The folded a must still be a BLAS layout (blas_layout). */
static int fold_batch(const em_view *out, const em_view *a, const em_view *b, em_view *fo,
                      em_view *fa, em_view *fb) {
    const int r = out->rank;
    const int64_t m = out->shape[r - 2];
    int64_t rs = m > 1 ? a->strides[r - 2] : 0, rows = m; /* rs 0: not yet known (m 1) */
    int f = r - 2; /* dims f .. r - 3 fold */
    for (int d = r - 3; d >= 0; d--) {
        if (out->shape[d] == 1) {
            f = d;
            continue;
        }
        if (b->strides[d] != 0) break;
        if (rs == 0) rs = a->strides[d]; /* m 1: the batch stride is the row stride */
        if (a->strides[d] != rows * rs) break;
        rows *= out->shape[d];
        f = d;
    }
    if (rows == m || rs == 0) return 0;
    *fo = *out;
    *fa = *a;
    *fb = *b;
    fo->rank = fa->rank = fb->rank = f + 2;
    fo->shape[f] = fa->shape[f] = rows;
    fo->shape[f + 1] = out->shape[r - 1];
    fo->strides[f] = out->shape[r - 1];
    fo->strides[f + 1] = 1;
    fa->shape[f + 1] = a->shape[r - 1];
    fa->strides[f] = rs;
    fa->strides[f + 1] = a->strides[r - 1];
    for (int q = 0; q < 2; q++) {
        fb->shape[f + q] = b->shape[r - 2 + q];
        fb->strides[f + q] = b->strides[r - 2 + q];
    }
    CBLAS_TRANSPOSE t;
    int64_t ld;
    return blas_layout(fa, &t, &ld) ? f + 2 : 0;
}

/* Batch items of a matmul too small each to be split over the pool run side by side. */
typedef struct batch_job {
    const em_view *out, *a, *b;
    CBLAS_TRANSPOSE ta, tb;
    int64_t m, n, k, lda, ldb;
} batch_job;

static void batch_range(int64_t lo, int64_t hi, void *arg) {
    const batch_job *j = arg;
    const size_t sz = em_dtype_size(j->out->dtype);
    for (int64_t bi = lo; bi < hi; bi++) {
        int64_t oa, ob;
        batch_offsets(j->out, j->a, j->b, bi, &oa, &ob);
        gemm_job g = {j->out->dtype, j->ta, j->tb, j->m, j->n, j->k, j->lda, j->ldb, j->n,
                      (const char *)j->a->buf + oa * (int64_t)sz,
                      (const char *)j->b->buf + ob * (int64_t)sz,
                      (char *)j->out->buf + (j->out->offset + bi * j->m * j->n) * (int64_t)sz,
                      0.0, false, gemm_ember_for(j->m, j->n, j->k)};
        gemm_range(0, j->m, &g);
    }
}

static em_status matmul_blas(const em_view *out_, const em_view *a, const em_view *b) {
    em_view ca = *a, cb = *b, fo, fa, fb;
    const em_view *out = out_;
    void *ta = NULL, *tb = NULL;
    CBLAS_TRANSPOSE tra = CblasNoTrans, trb = CblasNoTrans;
    int64_t lda = 1, ldb = 1;
    em_status s = EM_OK;
    if (!blas_layout(a, &tra, &lda)) s = cpu_contig_input(a, &ca, &ta);
    if (s == EM_OK && !blas_layout(b, &trb, &ldb)) s = cpu_contig_input(b, &cb, &tb);
    if (s == EM_OK && fold_batch(out, &ca, &cb, &fo, &fa, &fb)) {
        out = &fo;
        ca = fa;
        cb = fb;
    }
    int r = out->rank;
    int64_t m = out->shape[r - 2], n = out->shape[r - 1], k = ca.shape[r - 1];
    int64_t batch = 1;
    for (int d = 0; d < r - 2; d++) batch *= out->shape[d];
    if (s == EM_OK) {
        blas_layout(&ca, &tra, &lda);
        blas_layout(&cb, &trb, &ldb);
    }
    size_t sz = em_dtype_size(out->dtype);
    char *o = (char *)out->buf + out->offset * (int64_t)sz;
    if (s == EM_OK && k == 0) {
        memset(o, 0, (size_t)(batch * m * n) * sz);
    } else if (s == EM_OK && batch > 1 && cpu_threads() > 1 &&
               (double)m * (double)n * (double)k < (1 << 20)) {
        /* items too small for cpu_gemm to split: the pool takes whole items */
        batch_job j = {out, &ca, &cb, tra, trb, m, n, k, lda, ldb};
        cpu_parallel_for(batch, ((1 << 20) / (m * n * k + 1)) / 4 + 1, batch_range, &j);
    } else {
        for (int64_t bi = 0; s == EM_OK && bi < batch; bi++) {
            int64_t oa, ob;
            batch_offsets(out, &ca, &cb, bi, &oa, &ob);
            char *pa = (char *)ca.buf + oa * (int64_t)sz, *pb = (char *)cb.buf + ob * (int64_t)sz;
            cpu_gemm(out->dtype, tra, trb, m, n, k, pa, lda, pb, ldb, 0.0,
                     o + bi * m * n * (int64_t)sz, n);
        }
    }
    if (ta) cpu_scratch_free(ta);
    if (tb) cpu_scratch_free(tb);
    return s;
}

/* ---- integer matmul: i-k-j loops accumulating in int64 (wrapping on store, as ref), rows
 *      of each batch item split over the pool ---- */

typedef struct imm_job {
    const em_view *out;
    em_view a, b; /* contiguous */
    int64_t m, n, k, batch;
} imm_job;

static int64_t ld_int(const void *p, em_dtype dt, int64_t i) {
    switch (dt) {
    case EM_I64: return ((const int64_t *)p)[i];
    case EM_I32: return ((const int32_t *)p)[i];
    case EM_I16: return ((const int16_t *)p)[i];
    case EM_I8: return ((const int8_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

static void st_int(void *p, em_dtype dt, int64_t i, int64_t v) {
    switch (dt) {
    case EM_I64: ((int64_t *)p)[i] = v; break;
    case EM_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
    case EM_I16: ((int16_t *)p)[i] = (int16_t)(uint16_t)(uint64_t)v; break;
    case EM_I8: ((int8_t *)p)[i] = (int8_t)(uint8_t)(uint64_t)v; break;
    default: ((uint8_t *)p)[i] = (uint8_t)(uint64_t)v; break;
    }
}

static void imm_rows(int64_t lo, int64_t hi, void *arg) {
    const imm_job *j = arg;
    em_dtype dt = j->out->dtype;
    int64_t *acc = cpu_scratch((size_t)j->n * sizeof(int64_t));
    if (!acc) return; /* cannot happen for sane n; the rows stay unwritten */
    for (int64_t row = lo; row < hi; row++) {
        int64_t bi = row / j->m, i = row % j->m, oa, ob;
        batch_offsets(j->out, &j->a, &j->b, bi, &oa, &ob);
        for (int64_t c = 0; c < j->n; c++) acc[c] = 0;
        for (int64_t p = 0; p < j->k; p++) {
            /* products wrap like the ref kernel's int64 arithmetic */
            uint64_t av = (uint64_t)ld_int(j->a.buf, dt, oa + i * j->a.strides[j->a.rank - 2] +
                                                            p * j->a.strides[j->a.rank - 1]);
            int64_t brow = ob + p * j->b.strides[j->b.rank - 2];
            for (int64_t c = 0; c < j->n; c++)
                acc[c] = (int64_t)((uint64_t)acc[c] +
                                   av * (uint64_t)ld_int(j->b.buf, dt,
                                                         brow + c * j->b.strides[j->b.rank - 1]));
        }
        int64_t o = j->out->offset + row * j->n;
        for (int64_t c = 0; c < j->n; c++) st_int(j->out->buf, dt, o + c, acc[c]);
    }
    cpu_scratch_free(acc);
}

static em_status matmul_int(const em_view *out, const em_view *a, const em_view *b) {
    int r = out->rank;
    imm_job j = {out, *a, *b, out->shape[r - 2], out->shape[r - 1], a->shape[r - 1], 1};
    for (int d = 0; d < r - 2; d++) j.batch *= out->shape[d];
    int64_t rows = j.batch * j.m;
    int64_t grain = (1 << 16) / (j.n * j.k + 1) + 1;
    cpu_parallel_for(rows, grain, imm_rows, &j);
    return EM_OK;
}

/* ---- bool matmul: out[i, j] = OR over p of (a[i, p] && b[p, j]) (ref's wrapping int64 sum
 *      of products, stored as != 0, is nonzero exactly then); rows split over the pool ---- */

typedef struct bmm_job {
    const em_view *out, *a, *b;
    int64_t m, n, k;
} bmm_job;

static void bmm_rows(int64_t lo, int64_t hi, void *arg) {
    const bmm_job *j = arg;
    const int r = j->out->rank;
    const int64_t asm_ = j->a->strides[r - 2], ask = j->a->strides[r - 1];
    const int64_t bsk = j->b->strides[r - 2], bsn = j->b->strides[r - 1];
    const uint8_t *A = j->a->buf, *B = j->b->buf;
    uint8_t *O = j->out->buf;
    for (int64_t row = lo; row < hi; row++) {
        const int64_t bi = row / j->m, i = row % j->m;
        int64_t oa, ob;
        batch_offsets(j->out, j->a, j->b, bi, &oa, &ob);
        uint8_t *o = O + j->out->offset + row * j->n; /* out: contiguous */
        memset(o, 0, (size_t)j->n);
        for (int64_t p = 0; p < j->k; p++) {
            if (!A[oa + i * asm_ + p * ask]) continue;
            const uint8_t *brow = B + ob + p * bsk;
            for (int64_t c = 0; c < j->n; c++) o[c] |= brow[c * bsn] != 0;
        }
    }
}

static em_status matmul_bool(const em_view *out, const em_view *a, const em_view *b) {
    const int r = out->rank;
    bmm_job j = {out, a, b, out->shape[r - 2], out->shape[r - 1], a->shape[r - 1]};
    int64_t rows = j.m;
    for (int d = 0; d < r - 2; d++) rows *= out->shape[d];
    cpu_parallel_for(rows, (1 << 16) / (j.n * j.k + 1) + 1, bmm_rows, &j);
    return EM_OK;
}

em_status cpu_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b) {
    if (out->rank < 2 || a->rank != out->rank || b->rank != out->rank)
        return em_backend_set_error(EM_ERR_SHAPE, "cpu: matmul takes out, a and b of one rank "
                                    ">= 2 ([..., m, n] = [..., m, k] @ [..., k, n]); got ranks "
                                    "%d, %d, %d", out->rank, a->rank, b->rank);
    if (cpu_numel(out) == 0) return EM_OK;
    if (!cpu_contiguous(out)) { /* computed contiguous, then copied into out's layout */
        cpu_stage so;
        em_status s = cpu_stage_out(out, out->dtype, false, &so);
        if (s == EM_OK) s = cpu_stage_out_finish(out, &so, cpu_matmul(ctx, &so.v, a, b));
        return s;
    }
    if (out->dtype == EM_BOOL) return matmul_bool(out, a, b);
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
        if (s == EM_OK) s = cpu_copy(ctx, out, &fo);
        if (ta) cpu_scratch_free(ta);
        if (tb) cpu_scratch_free(tb);
        if (to) cpu_scratch_free(to);
        return s;
    }
    if (out->dtype == EM_I64 || out->dtype == EM_I32 || out->dtype == EM_I16 ||
        out->dtype == EM_I8 || out->dtype == EM_U8)
        return matmul_int(out, a, b);
    return CPU_FALLBACK(CPU_FB_MATMUL, out->dtype, matmul, ctx, out, a, b);
}
