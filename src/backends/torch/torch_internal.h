/*
 * torch_internal.h — shared pieces of the torch backend (a plugin: libember-torch.so).
 *
 * The backend runs ember's kernel slots on PyTorch's own ATen operators over ember's host
 * buffers: each em_view becomes an at::Tensor over the buffer (at::from_blob with the view's
 * shape, strides and offset; no copy), outputs are written in place (the *_out forms, or
 * copy_ into the output view). Every slot catches c10::Error (and any other C++ exception)
 * and returns EM_ERR_BACKEND with torch's message, through EMT_BEGIN / EMT_END.
 *
 * Conventions every kernel file follows:
 *   - f16 and bf16 are computed in f32 and rounded once when stored (emt::compute_type), as
 *     ref does and as PyTorch's CPU kernels often cannot (many lack Half in 1.13);
 *   - a view with a negative stride is copied first (emt::in(), which flips it); output
 *     views are never negative except copy's (handled there);
 *   - the plugin does not link libember: errors go through emt::fail (the host's
 *     set_error), other backends' kernels through emt::host->backend_get.
 *
 * Kernel files each fill their slots in an em_backend_ops (emt_fill_*), called once by
 * torch.cpp when the table is built.
 */
#ifndef EMBER_TORCH_INTERNAL_H
#define EMBER_TORCH_INTERNAL_H

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <exception>
#include <new>
#include <vector>

#include "ember/backend.h"

namespace emt {

/** The host table given to ember_plugin_init. */
extern const em_plugin_host *host;

/** Sets this thread's message (printf-style, through the host) and returns s. */
em_status fail(em_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/** ATen's scalar type for an ember dtype (quantized dtypes are never given to torch). */
at::ScalarType scalar_type(em_dtype dt);

/** True for f16 and bf16. */
inline bool is_half(em_dtype dt) { return dt == EM_F16 || dt == EM_BF16; }

/** The type a kernel computes in: f32 for f16 / bf16, the dtype itself otherwise. */
at::ScalarType compute_type(em_dtype dt);

/** The tensor a view names, over ember's buffer (no copy; the caller may write through it
 *  when the view is an output). Negative strides are not allowed here: see in(). */
at::Tensor wrap(const em_view *v);

/** The positive-stride view of v's memory; the dims whose strides were negative are appended
 *  to *flipped. */
em_view positive(const em_view *v, std::vector<int64_t> *flipped);

/** An input: wrap(v), or for a view with negative strides a tensor with the same values
 *  (flipped from the positive-stride view of the same memory, which copies). */
at::Tensor in(const em_view *v);

/** An input in its compute type: in(v), converted to f32 for f16 / bf16. */
at::Tensor in_c(const em_view *v);

/** Writes r into the output view out (converting to out's dtype, rounding f32 to f16 /
 *  bf16 once). r must have out's shape (or broadcast to it). */
void store(const em_view *out, const at::Tensor &r);

/** The intra-op thread count the backend runs with (EMBER_NUM_THREADS, or the CPUs this
 *  process may use). */
int threads();

/** While it lives, OpenBLAS (which ATen's products call) runs one thread; the count it had is
 *  restored after. ATen's own intra-op pool (OpenMP) already runs threads() threads, and
 *  OpenBLAS's pool is a second one: the idle workers of each spin while the other's run, so
 *  with both at threads() the machine is oversubscribed (measured: the MLP's epoch on 2 cores
 *  took 1.3-1.5 s with both pools, 0.5 s with OpenBLAS at one thread, and the cpu backend's
 *  products beside it ran at half speed). Products are split over ATen's pool instead (bmm
 *  below); convolutions already run a product per sample on it. A no-op when the BLAS is not
 *  OpenBLAS. */
class blas_single {
  public:
    blas_single();
    ~blas_single();
    blas_single(const blas_single &) = delete;
    blas_single &operator=(const blas_single &) = delete;

  private:
    int prev_;
};

/** out[i] = a[i] @ b[i] for 3-d tensors of one dtype, out contiguous and of the result's
 *  shape: the rows of all the products are split into parts over ATen's intra-op threads,
 *  each part a single-threaded product (at::mm_out) of a block of rows (under blas_single). */
void bmm_into(const at::Tensor &out, const at::Tensor &a, const at::Tensor &b);

/** a[i] @ b[i] into a new contiguous tensor, as bmm_into. */
at::Tensor bmm(const at::Tensor &a, const at::Tensor &b);

/** Turns an exception into a status and message (c10::Error: EM_ERR_BACKEND with torch's
 *  message without its backtrace; std::bad_alloc: EM_ERR_NOMEM). */
em_status from_exception(const char *what, std::exception_ptr e);

} // namespace emt

/* Wraps a kernel body: c10::InferenceMode (no autograd bookkeeping) and the exception
 * barrier. Usage:  EMT_BEGIN  ... body ...  EMT_END("add")  (the body returns nothing). */
#define EMT_BEGIN                                                                             \
    try {                                                                                     \
        c10::InferenceMode emt_guard_;
#define EMT_END(what)                                                                         \
    }                                                                                         \
    catch (...) {                                                                             \
        return emt::from_exception(what, std::current_exception());                           \
    }                                                                                         \
    return EM_OK;

/* Each kernel file fills its slots (ctx is always the backend's: unused by the kernels). */
void emt_fill_elementwise(em_backend_ops *ops); /* elementwise.cpp: unary binary binary_scalar
                                                   where unary_backward adam_step */
void emt_fill_reduce(em_backend_ops *ops);      /* reduce.cpp: reduce cumsum softmax cumulative
                                                   sort gather scatter_add index_select */
void emt_fill_nn(em_backend_ops *ops);          /* nn.cpp: matmul conv2d conv_transpose2d pools
                                                   conv2d_weight_grad pool backwards layer_norm
                                                   batch_norm(_backward) group_norm rms_norm
                                                   sdpa sdpa_backward */

#endif /* EMBER_TORCH_INTERNAL_H */
