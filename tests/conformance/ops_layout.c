/* The layout and indexing families' wrappers for the conformance runner.
 *
 * Params: "shape", "perm", "dims", "reps" (int lists); "dim", "dim0", "dim1", "start_dim",
 * "end_dim", "size", "k", "num_classes", "dtype", "cap", "n" (ints); "start", "stop", "step"
 * (a value at or beyond +-2^52 means INT64_MAX / INT64_MIN; absent means an open end, as
 * Python's None); "descending", "largest" (bools); "want" for sort/topk (0: values and
 * indices, 1: values only, 2: indices only, 3: neither). */
#include <stddef.h>

#include "conformance.h"

#define OPEN_END 4503599627370496.0 /* 2^52 */
#define LIST_CAP 16

/** A slice bound: absent -> def, |v| >= 2^52 -> INT64_MAX / INT64_MIN. */
static int64_t bound(const conf_params *p, const char *key, int64_t def) {
    double v = conf_f64(p, key, 0.0);
    int64_t tmp[1];
    if (conf_ints(p, key, tmp, 1) < 1) return def;
    if (v >= OPEN_END) return INT64_MAX;
    if (v <= -OPEN_END) return INT64_MIN;
    return (int64_t)v;
}

/** An int list param as int64 (count clamped to LIST_CAP; 0 when absent). */
static int ilist(const conf_params *p, const char *key, int64_t *out) {
    int n = conf_ints(p, key, out, LIST_CAP);
    if (n < 0) return 0;
    return n > LIST_CAP ? LIST_CAP : n;
}

/** An int list param as int. */
static int ilist_int(const conf_params *p, const char *key, int *out) {
    int64_t tmp[LIST_CAP];
    int n = ilist(p, key, tmp);
    for (int i = 0; i < n; i++) out[i] = (int)tmp[i];
    return n;
}

/** The slice params (start, stop, step) with Python's None defaults. */
static void slice_params(const conf_params *p, int64_t *start, int64_t *stop, int64_t *step) {
    *step = conf_int(p, "step", 1);
    *start = bound(p, "start", *step > 0 ? 0 : INT64_MAX);
    *stop = bound(p, "stop", *step > 0 ? INT64_MAX : INT64_MIN);
}

/** One result: *nout = 1 on success. */
static em_status one(em_status s, int *nout) {
    *nout = s == EM_OK ? 1 : 0;
    return s;
}

static em_status w_reshape(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                           int *nout) {
    int64_t shape[LIST_CAP];
    int n = ilist(p, "shape", shape);
    return one(em_reshape(in[0], shape, n, &out[0]), nout);
}

static em_status w_flatten(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                           int *nout) {
    return one(em_flatten(in[0], (int)conf_int(p, "start_dim", 0), (int)conf_int(p, "end_dim", -1),
                          &out[0]),
               nout);
}

static em_status w_permute(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                           int *nout) {
    int perm[LIST_CAP];
    int n = ilist_int(p, "perm", perm);
    return one(em_permute(in[0], perm, n, &out[0]), nout);
}

static em_status w_transpose(em_tensor *const *in, int nin, const conf_params *p,
                             em_tensor **out, int *nout) {
    return one(em_transpose(in[0], (int)conf_int(p, "dim0", 0), (int)conf_int(p, "dim1", 1),
                            &out[0]),
               nout);
}

static em_status w_expand(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                          int *nout) {
    int64_t shape[LIST_CAP];
    int n = ilist(p, "shape", shape);
    return one(em_expand(in[0], shape, n, &out[0]), nout);
}

static em_status w_slice(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                         int *nout) {
    int64_t start, stop, step;
    slice_params(p, &start, &stop, &step);
    return one(em_slice(in[0], (int)conf_int(p, "dim", 0), start, stop, step, &out[0]), nout);
}

static em_status w_slice_assign(em_tensor *const *in, int nin, const conf_params *p,
                                em_tensor **out, int *nout) {
    int64_t start, stop, step;
    slice_params(p, &start, &stop, &step);
    return one(em_slice_assign(in[0], (int)conf_int(p, "dim", 0), start, stop, step, in[1],
                               &out[0]),
               nout);
}

static em_status w_cat(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                       int *nout) {
    size_t n = (size_t)conf_int(p, "n", nin);
    return one(em_cat((const em_tensor *const *)in, n, (int)conf_int(p, "dim", 0), &out[0]),
               nout);
}

static em_status w_stack(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                         int *nout) {
    size_t n = (size_t)conf_int(p, "n", nin);
    return one(em_stack((const em_tensor *const *)in, n, (int)conf_int(p, "dim", 0), &out[0]),
               nout);
}

static em_status w_split(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                         int *nout) {
    size_t count = 0;
    size_t cap = (size_t)conf_int(p, "cap", CONF_MAX_IO);
    if (cap > CONF_MAX_IO) cap = CONF_MAX_IO;
    em_status s = em_split(in[0], conf_int(p, "size", 1), (int)conf_int(p, "dim", 0), out, cap,
                           &count);
    *nout = s == EM_OK ? (int)count : 0;
    return s;
}

static em_status w_squeeze(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                           int *nout) {
    return one(em_squeeze(in[0], (int)conf_int(p, "dim", 0), &out[0]), nout);
}

static em_status w_squeeze_all(em_tensor *const *in, int nin, const conf_params *p,
                               em_tensor **out, int *nout) {
    return one(em_squeeze_all(in[0], &out[0]), nout);
}

static em_status w_unsqueeze(em_tensor *const *in, int nin, const conf_params *p,
                             em_tensor **out, int *nout) {
    return one(em_unsqueeze(in[0], (int)conf_int(p, "dim", 0), &out[0]), nout);
}

static em_status w_flip(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                        int *nout) {
    int dims[LIST_CAP];
    int n = ilist_int(p, "dims", dims);
    return one(em_flip(in[0], dims, n, &out[0]), nout);
}

static em_status w_repeat(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                          int *nout) {
    int64_t reps[LIST_CAP];
    int n = ilist(p, "reps", reps);
    return one(em_repeat(in[0], reps, n, &out[0]), nout);
}

/* ---- indexing ---- */

static em_status w_tril(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                        int *nout) {
    (void)nin;
    *nout = 1;
    return em_tril(in[0], conf_int(p, "diagonal", 0), &out[0]);
}

static em_status w_triu(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                        int *nout) {
    (void)nin;
    *nout = 1;
    return em_triu(in[0], conf_int(p, "diagonal", 0), &out[0]);
}

static em_status w_gather(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                          int *nout) {
    return one(em_gather(in[0], (int)conf_int(p, "dim", 0), in[1], &out[0]), nout);
}

static em_status w_scatter_add(em_tensor *const *in, int nin, const conf_params *p,
                               em_tensor **out, int *nout) {
    return one(em_scatter_add(in[0], (int)conf_int(p, "dim", 0), in[1], in[2], &out[0]), nout);
}

static em_status w_index_select(em_tensor *const *in, int nin, const conf_params *p,
                                em_tensor **out, int *nout) {
    return one(em_index_select(in[0], (int)conf_int(p, "dim", 0), in[1], &out[0]), nout);
}

static em_status w_one_hot(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                           int *nout) {
    return one(em_one_hot(in[0], conf_int(p, "num_classes", -1),
                          (em_dtype)conf_int(p, "dtype", EM_I64), &out[0]),
               nout);
}

/** Runs a two-output op, keeping the outputs that "want" selects. */
static em_status two(em_status s, int64_t want, int *nout) {
    *nout = 0;
    if (s != EM_OK) return s;
    *nout = want == 0 ? 2 : 1;
    return s;
}

static em_status w_sort(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                        int *nout) {
    int64_t want = conf_int(p, "want", 0);
    em_tensor **v = want == 0 || want == 1 ? &out[0] : NULL;
    em_tensor **i = want == 0 ? &out[1] : want == 2 ? &out[0] : NULL;
    return two(em_sort(in[0], (int)conf_int(p, "dim", -1), conf_bool(p, "descending", false), v,
                       i),
               want, nout);
}

static em_status w_argsort(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                           int *nout) {
    return one(em_argsort(in[0], (int)conf_int(p, "dim", -1), conf_bool(p, "descending", false),
                          &out[0]),
               nout);
}

static em_status w_topk(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                        int *nout) {
    int64_t want = conf_int(p, "want", 0);
    em_tensor **v = want == 0 || want == 1 ? &out[0] : NULL;
    em_tensor **i = want == 0 ? &out[1] : want == 2 ? &out[0] : NULL;
    return two(em_topk(in[0], conf_int(p, "k", 1), (int)conf_int(p, "dim", -1),
                       conf_bool(p, "largest", true), v, i),
               want, nout);
}

const conf_op conf_ops_layout[] = {
    {"reshape", w_reshape},
    {"flatten", w_flatten},
    {"permute", w_permute},
    {"transpose", w_transpose},
    {"expand", w_expand},
    {"slice", w_slice},
    {"slice_assign", w_slice_assign},
    {"cat", w_cat},
    {"stack", w_stack},
    {"split", w_split},
    {"squeeze", w_squeeze},
    {"squeeze_all", w_squeeze_all},
    {"unsqueeze", w_unsqueeze},
    {"flip", w_flip},
    {"repeat", w_repeat},
    {"gather", w_gather},
    {"scatter_add", w_scatter_add},
    {"index_select", w_index_select},
    {"one_hot", w_one_hot},
    {"sort", w_sort},
    {"argsort", w_argsort},
    {"topk", w_topk},
    {"tril", w_tril},
    {"triu", w_triu},
    {NULL, NULL},
};
