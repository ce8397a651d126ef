/*
 * dist.h — collectives on ember tensors over MPI, and data-parallel training.
 *
 * Built when CMake finds MPI (EMBER_WITH_MPI, Debian's Open MPI): the library libember-dist
 * (CMake target ember::ember_dist, pkg-config ember-dist) beside libember, so that programs
 * that do not use it never link MPI. Every call returns an em_status and sets em_last_error()
 * as ember.h's calls do; MPI's own errors come back as EM_ERR_BACKEND with MPI's string (the
 * communicator's error handler is MPI_ERRORS_RETURN: nothing aborts).
 *
 * Run under a launcher:   mpirun -np 2 ./program      (README: one machine, several, as root)
 *
 * Tensors of every device take part: host-memory tensors (ref, cpu, torch) are reduced where
 * they lie when they are contiguous; others (opencl, remote, ...) are staged through host
 * memory. Every dtype MPI can carry: f32, f64, i64, i32, i16, i8, u8, bool (max: or, min:
 * and, sum: or), and f16 / bf16 as 16-bit payloads reduced by ember's own MPI operations (each
 * pair summed in f32 and rounded once, so a sum over N ranks is rounded N - 1 times, as a ring
 * all-reduce in the dtype would be). Quantized tensors: EM_ERR_DTYPE. Tensors on autodiff
 * devices are reduced as values (untracked; the result is not in a graph).
 *
 * Failure is an error, not a hang: a collective that does not complete within the timeout
 * (em_dist_set_timeout; EMBER_DIST_TIMEOUT seconds, default 300) fails with EM_ERR_BACKEND
 * naming the ranks that did not reach it, and a rank that dies makes the others fail within
 * that time with a message naming it. (Open MPI's mpirun kills the whole job when a rank dies;
 * `mpirun --enable-recovery` lets the others run on, return that error and finalize.)
 */
#ifndef EMBER_DIST_H
#define EMBER_DIST_H

#include "ember.h"
#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A communicator ember runs collectives on (a duplicate of the one it was made from). */
typedef struct em_dist em_dist;

/** A collective started without waiting (em_all_reduce_start, ...): wait for it with
 *  em_dist_wait, which frees it. */
typedef struct em_dist_work em_dist_work;

typedef enum em_dist_op {
    EM_DIST_SUM = 0,
    EM_DIST_MEAN, /* the sum divided by the number of ranks (floats only: ints EM_ERR_DTYPE) */
    EM_DIST_MAX,
    EM_DIST_MIN
} em_dist_op;

/* ---- setup ---- */

/** Initializes MPI when it is not yet (MPI_Init_thread, MPI_THREAD_FUNNELED at least; argc
 *  and argv may be NULL) and gives a communicator over MPI_COMM_WORLD. A program that called
 *  MPI_Init itself may call this too (nothing is initialized twice). Errors: EM_ERR_BACKEND
 *  (MPI failed to start), EM_ERR_NOMEM. */
em_status em_dist_init(int *argc, char ***argv, em_dist **out);

/** A communicator over an existing MPI communicator (`comm` points at an MPI_Comm, which is
 *  duplicated: the caller's keeps its error handler and its traffic). MPI must be
 *  initialized. EM_ERR_ARG for NULL, EM_ERR_STATE when MPI is not initialized. */
em_status em_dist_from_comm(const void *comm, em_dist **out);

/** Frees the communicator. The last em_dist_free of a process whose MPI was initialized by
 *  em_dist_init also finalizes MPI. NULL is a no-op. */
void em_dist_free(em_dist *d);

/** This process's rank and the number of ranks (0 and 1 for NULL). */
int em_dist_rank(const em_dist *d);
int em_dist_size(const em_dist *d);

/** Sets the timeout of every wait on d, in seconds (> 0). EM_ERR_ARG otherwise. */
em_status em_dist_set_timeout(em_dist *d, double seconds);

/* ---- collectives: blocking ----
 * Every rank calls the same collectives in the same order with tensors of the same dtype and
 * shape (all_gather and reduce_scatter: as each says); a mismatch that MPI can see is
 * EM_ERR_BACKEND, one it cannot is undefined (as in MPI). */

/** Reduces t over all ranks, in place: t's values (its buffer; views of it see them) become the
 *  reduction. t is contiguous or any view (a strided one is reduced through a copy). */
em_status em_all_reduce(em_dist *d, em_tensor *t, em_dist_op op);

/** Sets t (in place) on every rank to root's t. EM_ERR_ARG for a root outside the ranks. */
em_status em_broadcast(em_dist *d, em_tensor *t, int root);

/** *out = the ranks' t concatenated along dim 0 (rank order): [size * t.shape[0], ...], on t's
 *  device (a 0-d t gives [size]). Every rank's t has the same shape. */
em_status em_all_gather(em_dist *d, const em_tensor *t, em_tensor **out);

/** *out = this rank's block of the reduction of t over all ranks: t.shape[0] must be a
 *  multiple of the number of ranks (EM_ERR_SHAPE otherwise), and rank r gets rows
 *  [r * n / size, (r + 1) * n / size) of the reduced t. */
em_status em_reduce_scatter(em_dist *d, const em_tensor *t, em_dist_op op, em_tensor **out);

/** Waits until every rank has called it. */
em_status em_barrier(em_dist *d);

/* ---- collectives: non-blocking ----
 * Each starts the collective and returns at once with a handle; the tensors given stay in use
 * (they must not be released, written or read for the result) until em_dist_wait returns.
 * Collectives started on one em_dist complete in the order they were started. */
em_status em_all_reduce_start(em_dist *d, em_tensor *t, em_dist_op op, em_dist_work **work);
em_status em_broadcast_start(em_dist *d, em_tensor *t, int root, em_dist_work **work);
/** Completes the work (its result in place) and frees the handle, on success or failure.
 *  NULL is EM_ERR_ARG. A wait that fails (the timeout, an MPI error) leaves the communicator
 *  refusing further collectives (EM_ERR_STATE): its ranks no longer agree on which collective
 *  is which; the tensor's values are then unspecified (MPI may still complete the collective
 *  into them later: d keeps the tensor alive until em_dist_free). */
em_status em_dist_wait(em_dist_work *work);
/** True when the work has completed (em_dist_wait then returns at once); false while it
 *  runs or for NULL. Drives MPI's progress. */
bool em_dist_test(em_dist_work *work);

/* ---- data-parallel training ----
 * One model replica per rank, each rank training on its shard of every global batch: the
 * gradients are averaged over the ranks in buckets of about bucket_bytes (filled in the order
 * backward completes the parameters, the last layers first), each bucket's all-reduce started
 * as soon as it is full while backward still runs (em_backward_hooked), so that communication
 * overlaps computation. Every rank then holds the same averaged gradients and takes the same
 * optimizer step: the replicas stay identical. The result equals training one process on the
 * global batch when each rank's loss is the mean over its shard of equal size (the average of
 * the ranks' means is the global mean). */
typedef struct em_ddp em_ddp;

/** A data-parallel trainer for module m's parameters (em_module_params order, nn.h) on d:
 *  broadcasts every parameter and buffer from rank 0 so that all replicas start equal.
 *  bucket_bytes 0 means 25 MiB (PyTorch's default). d and m are borrowed and must outlive it.
 *  Errors: EM_ERR_ARG (NULL), the collectives' errors. */
em_status em_ddp_create(em_dist *d, em_module *m, size_t bucket_bytes, em_ddp **out);

/** em_backward for data-parallel training: the gradients of loss (a rank's mean over its
 *  shard), averaged over all ranks, into *grads (as em_backward gives them; for
 *  em_optimizer_step). A parameter no rank's loss reaches gets no gradient; one that only
 *  some ranks reach gets the average with zeros for the others. */
em_status em_ddp_backward(em_ddp *ddp, const em_tensor *loss, em_grads **grads);

/** Frees the trainer (not the module or communicator). NULL is a no-op. */
void em_ddp_free(em_ddp *ddp);

#ifdef __cplusplus
}
#endif
#endif /* EMBER_DIST_H */
