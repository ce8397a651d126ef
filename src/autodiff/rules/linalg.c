/* linalg.c — backward rule of matmul (numpy.matmul rules). */
#include "autodiff/rules/rules.h"

/* Evaluates a status expression into `s` and jumps to `done` when it fails. */
#define L_TRY(expr)                                                                          \
    do {                                                                                     \
        s = (expr);                                                                          \
        if (s != EM_OK) goto done;                                                           \
    } while (0)

static em_status matmul_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)p;
    (void)nin;
    return em_matmul(in[0], in[1], out);
}

/* *out = a new reference to t. */
static em_status mm_keep(em_tensor *t, em_tensor **out) {
    em_tensor_retain(t);
    *out = t;
    return EM_OK;
}

/* gin[i] = t (batch..., with the promoted dim already removed) summed over the batch dims
 * that broadcasting added or stretched, so that it has input i's shape; consumes t. */
static em_status mm_put(emi_ad_bw *bw, int i, em_tensor *t) {
    int rank;
    const int64_t *shape = emi_bw_in_shape(bw, i, &rank);
    em_status s = emi_ad_unbroadcast(t, shape, rank, &bw->gin[i]);
    em_tensor_release(t);
    return s;
}

/* True when t is a 2-d column-major matrix (the transpose of a contiguous one, as a Linear
 * layer's weight is used), whose gradient is then best made in that layout too: computed as
 * the transpose of a contiguous product, so that the transpose backward hands the weight a
 * contiguous gradient (the optimizer's elementwise ops then run on dense memory). */
static bool mm_col_major(const em_tensor *t) {
    const em_view *v = &t->v;
    return v->rank == 2 && v->shape[0] > 1 && v->shape[1] > 1 && v->strides[0] == 1 &&
           v->strides[1] == v->shape[0];
}

/* *out = x @ y in column-major layout: the contiguous product y^T @ x^T, viewed transposed. */
static em_status mm_transposed(em_tensor *x, em_tensor *y, em_tensor **out) {
    em_tensor *xt = NULL, *yt = NULL, *p = NULL;
    em_status s = em_transpose(x, -1, -2, &xt);
    if (s == EM_OK) s = em_transpose(y, -1, -2, &yt);
    if (s == EM_OK) s = em_matmul(yt, xt, &p);
    if (s == EM_OK) s = em_transpose(p, -1, -2, out);
    em_tensor_release(xt);
    em_tensor_release(yt);
    em_tensor_release(p);
    return s;
}

/* With the operands promoted as the forward did (a 1-d a as [1, k], a 1-d b as [k, 1]) and
 * g given back the dims their promotion removed from the result ([batch..., m, n]):
 *   ga = g @ b^T   ([batch..., m, k]),   gb = a^T @ g   ([batch..., k, n]),
 * each then loses its promoted dim again and is summed over broadcast batch dims. */
static em_status matmul_backward(emi_ad_bw *bw) {
    em_tensor *a, *b, *a2 = NULL, *b2 = NULL, *g1 = NULL, *g2 = NULL, *t = NULL, *p = NULL,
                      *q = NULL;
    int ra, rb;
    (void)emi_bw_in_shape(bw, 0, &ra);
    (void)emi_bw_in_shape(bw, 1, &rb);
    em_status s;
    L_TRY(emi_bw_input(bw, 0, &a));
    L_TRY(emi_bw_input(bw, 1, &b));
    const bool a_col_major = mm_col_major(a);
    L_TRY(ra == 1 ? em_unsqueeze(a, 0, &a2) : mm_keep(a, &a2));
    L_TRY(rb == 1 ? em_unsqueeze(b, 1, &b2) : mm_keep(b, &b2));
    /* the result without n (b was 1-d) gets it back last, without m (a was 1-d) before it */
    L_TRY(rb == 1 ? em_unsqueeze(bw->grad, -1, &g1) : mm_keep(bw->grad, &g1));
    L_TRY(ra == 1 ? em_unsqueeze(g1, -2, &g2) : mm_keep(g1, &g2));
    /* b's gradient first: it is the one that reads a */
    if (bw->need[1]) {
        if (rb == 2 && ra > 2) {
            /* a 2-d b under a batched a (a Linear layer on [B, T, C]): one product of a and
             * g with their batch dims merged into rows, so that b gets a dense [k, n]
             * gradient (in b's layout), not a batched product summed over the batch */
            const int64_t *as = em_tensor_shape(a2), *gs = em_tensor_shape(g2);
            int64_t rows = 1;
            for (int d = 0; d < ra - 1; d++) rows *= as[d];
            const int64_t af[2] = {rows, as[ra - 1]}, gf[2] = {rows, gs[ra - 1]};
            em_tensor_release(g1);
            g1 = NULL;
            L_TRY(em_reshape(a2, af, 2, &q));
            L_TRY(em_reshape(g2, gf, 2, &g1));
            L_TRY(em_transpose(q, -1, -2, &t));
            em_tensor_release(q);
            q = NULL;
        } else {
            L_TRY(em_transpose(a2, -1, -2, &t));
            em_tensor_retain(g2);
            em_tensor_release(g1);
            g1 = g2;
        }
        if (rb == 2 && em_tensor_rank(g1) == 2 && mm_col_major(b)) {
            L_TRY(mm_transposed(t, g1, &p)); /* [k, n], b's layout */
        } else if (em_tensor_rank(g1) == 2) {
            L_TRY(em_matmul(t, g1, &p)); /* [k, n] */
        } else {
            L_TRY(em_matmul(t, g2, &p)); /* [batch..., k, n] */
        }
        if (rb == 1) {
            L_TRY(em_squeeze(p, -1, &q));
            em_tensor_release(p);
            p = q;
            q = NULL;
        }
        s = mm_put(bw, 1, p);
        p = NULL;
        if (s != EM_OK) goto done;
    }
    /* a's value is not read again (a's gradient reads b and g): it goes before that
     * gradient, as large as a, is made (a recomputed or saved activation) */
    em_tensor_release(a2);
    a2 = NULL;
    em_tensor_release(t);
    t = NULL;
    emi_bw_input_done(bw, 0);
    if (bw->need[0]) {
        L_TRY(em_transpose(b2, -1, -2, &t));
        if (ra == 2 && em_tensor_rank(g2) == 2 && a_col_major) {
            L_TRY(mm_transposed(g2, t, &p)); /* [m, k], a's layout */
        } else {
            L_TRY(em_matmul(g2, t, &p)); /* [batch..., m, k] */
        }
        em_tensor_release(t);
        t = NULL;
        if (ra == 1) {
            L_TRY(em_squeeze(p, -2, &q));
            em_tensor_release(p);
            p = q;
            q = NULL;
        }
        s = mm_put(bw, 0, p);
        p = NULL;
        if (s != EM_OK) goto done;
    }
done:
    em_tensor_release(a2);
    em_tensor_release(b2);
    em_tensor_release(g1);
    em_tensor_release(g2);
    em_tensor_release(t);
    em_tensor_release(p);
    em_tensor_release(q);
    return s;
}

const emi_ad_rule emi_rule_matmul = {"matmul", true, EMI_NEED_IN(0) | EMI_NEED_IN(1),
                                     matmul_forward, matmul_backward};
