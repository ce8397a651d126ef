/*
 * ocl_kern.h — small host-side helpers shared by the reduction, matmul, indexing and neural
 * kernels of the OpenCL backend (reduce.c, matmul.c, index.c, nn.c): program options by
 * dtype, work-group sizes for "one group per line" kernels, line views and scalar arguments
 * in a kernel's accumulator type.
 */
#ifndef EMBER_OCL_KERN_H
#define EMBER_OCL_KERN_H

#include <stdio.h>

#include "backends/opencl/ocl.h"

/** Writes the build options "-DA=<tag>" for dtype dt into buf. */
static inline const char *okern_opts(char *buf, size_t cap, em_dtype dt) {
    snprintf(buf, cap, "-DA=%s", ocl_dtype_tag(dt));
    return buf;
}

/** The largest power of two <= x (x >= 1), capped at cap (a power of two). */
static inline size_t okern_pow2_floor(int64_t x, size_t cap) {
    size_t p = 1;
    while (p * 2 <= cap && (int64_t)(p * 2) <= x) p *= 2;
    return p;
}

/** The work-group size for one group a line of n elements: about `per` elements an item,
 *  a power of two between 1 and the device's preferred group size. */
static inline size_t okern_line_group(ocl_dev *d, int64_t n, int64_t per) {
    int64_t want = n / (per > 0 ? per : 1);
    return okern_pow2_floor(want < 1 ? 1 : want, ocl_group_size(d));
}

/** v with dim's extent set to 1: its element g is the head of line g along dim. */
static inline ocl_view_arg okern_heads(const em_view *v, int dim) {
    em_view h = *v;
    h.shape[dim] = 1;
    return ocl_view(&h);
}

/** True when every element of v is at v->offset + j * (*stride) for row-major j: the dims of
 *  extent > 1 chain into one stride (contiguous views, flipped 1-d views, ...). */
static inline bool okern_single_stride(const em_view *v, int64_t *stride) {
    int64_t s = 1, inner = 1; /* the stride and extent so far of the chained dims */
    bool any = false;
    for (int d = v->rank - 1; d >= 0; d--) {
        if (v->shape[d] == 1) continue;
        if (!any) {
            s = v->strides[d];
            any = true;
        } else if (v->strides[d] != s * inner) {
            return false;
        }
        inner *= v->shape[d];
    }
    *stride = s;
    return true;
}

/** A scalar kernel argument in the accumulator type of dtype dt's kernels (double for f64,
 *  float for the other floats, long for ints). */
typedef struct okern_acc {
    union {
        cl_float f;
        cl_double d;
        cl_long l;
    } u;
    size_t size;
} okern_acc;

/** v as the accumulator-type argument of dtype dt's kernels. */
static inline okern_acc okern_acc_of(em_dtype dt, double v) {
    okern_acc a;
    if (dt == EM_F64) {
        a.u.d = v;
        a.size = sizeof(cl_double);
    } else if (dt == EM_F32 || dt == EM_F16 || dt == EM_BF16) {
        a.u.f = (cl_float)v;
        a.size = sizeof(cl_float);
    } else {
        a.u.l = (cl_long)v;
        a.size = sizeof(cl_long);
    }
    return a;
}

/** The ocl_arg of an okern_acc. */
#define OKERN_ACC_ARG(a) ((ocl_arg){(a).size, &(a).u})

#endif /* EMBER_OCL_KERN_H */
