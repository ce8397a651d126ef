/*
 * fused.h — the internal entry points of the fused kernel slots (backend.h, ABI 3): the input
 * gradient of a unary op in one pass (the autodiff rules of src/autodiff/rules/
 * elementwise_unary.c) and one Adam / AdamW step in place (src/nn/optim.c). Public types only,
 * so that src/nn, which is written on the public API, can call them.
 *
 * Both answer EM_ERR_UNSUPPORTED, without a message, when the tensors' backend leaves the slot
 * NULL, when its kernel declines the case, or when fused kernels are switched off
 * (emi_fused_set, or EMBER_FUSED=0 in the environment, read once): the caller then composes
 * the result from public ops, as before the slots existed. Bad arguments are other statuses
 * with a message.
 */
#ifndef EMBER_OPS_FUSED_H
#define EMBER_OPS_FUSED_H

#include <stdbool.h>
#include <stdint.h>

#include "ember/backend.h"
#include "ember/ember.h"

/** *gx = gy * f'(.) for the unary op `op` (see backend.h's unary_backward for the ops and
 *  which value each reads: x, the op's input, or y, its output; pass NULL for the other).
 *  Untracked tensors of one float dtype, shape and device; params: clamp's lo and hi.
 *  *gx is a new contiguous tensor on gy's device. */
em_status emi_unary_backward(em_unary_op op, const em_tensor *x, const em_tensor *y,
                             const em_tensor *gy, const double *params, em_tensor **gx);

/** Which value op's fused gradient reads: 'x' (its input), 'y' (its output), or 0: op has
 *  none. */
char emi_unary_backward_reads(em_unary_op op);

/** On the capture device (gy's): records the fused call of emi_unary_backward as the start of
 *  a call with an alternative (GR_ALT) and makes its output *gx: the caller then composes the
 *  gradient (recorded as the alternative) and ends with emi_unary_backward_captured_end, so
 *  that a replay runs the fused kernel where the device has it (and fuses), the composition
 *  elsewhere, as each device's eager run does. EM_ERR_UNSUPPORTED: gy is not on capture. */
em_status emi_unary_backward_captured(em_unary_op op, const em_tensor *x, const em_tensor *y,
                                      const em_tensor *gy, const double *params, em_tensor **gx);
/** Ends what emi_unary_backward_captured began: s, the composition's status; on EM_OK copies
 *  *composed (consumed) into gx and replaces it with gx (consumed on failure). */
em_status emi_unary_backward_captured_end(em_status s, em_tensor *gx, em_tensor **composed);

/** One Adam / AdamW step with the scalars `a` (backend.h), in place: param, exp_avg and
 *  exp_avg_sq (untracked, contiguous, each alone in its buffer's view, one float dtype, shape
 *  and device) are updated from grad (any layout). */
em_status emi_adam_step(em_tensor *param, em_tensor *exp_avg, em_tensor *exp_avg_sq,
                        const em_tensor *grad, const em_adam_args *a);

/** The scalars of Adam's (adamw false) or AdamW's step number t (>= 1) with these settings and
 *  gradient scale (backend.h's em_adam_args, with the fold of the composed update): the one
 *  place they are computed, by the eager step (src/nn/optim.c) and by a captured graph's
 *  adam_step call at each replay (src/wire/adam.c), so that both give the same bits. */
em_adam_args emi_adam_args_of(bool adamw, double lr, double beta1, double beta2, double eps,
                              double weight_decay, int64_t t, double grad_scale);

/** One Adam / AdamW step with the scalars `a` composed from the device's basic slots (unary,
 *  binary, binary_scalar; temporaries from its alloc), operation for operation as
 *  src/nn/optim.c composes it from public ops on a device without the adam_step kernel: the
 *  same bits. param, exp_avg, exp_avg_sq: contiguous views of one float dtype and shape,
 *  updated in place; grad: a view of that shape the device's kernels read. decay: the step
 *  multiplies param by a->decay (AdamW with weight decay), as the eager step does. */
em_status emi_adam_compose(const em_backend_ops *ops, void *ctx, const em_view *param,
                           const em_view *exp_avg, const em_view *exp_avg_sq,
                           const em_view *grad, const em_adam_args *a, bool decay);

/** Records, on the capture device, one Adam (adamw false) or AdamW step whose step count is
 *  the graph's tensor `step` (one i64, read at each run: the step taken is number step + 1,
 *  and step is then advanced): the graph-only adam_step call (docs/graph-format.md). param
 *  (detached), exp_avg, exp_avg_sq and step are updated in place at replay; hyper: lr,
 *  beta1, beta2, eps, weight_decay, grad_scale. exp_avg, exp_avg_sq and step must be state
 *  of the graph (made in its setup) or inputs: EM_ERR_STATE otherwise. */
em_status emi_adam_step_captured(em_tensor *param, em_tensor *exp_avg, em_tensor *exp_avg_sq,
                                 const em_tensor *grad, em_tensor *step, bool adamw,
                                 const double hyper[6]);

/** True when the backend of t's device has a non-NULL unary_backward / adam_step slot and
 *  fused kernels are on. */
bool emi_has_unary_backward(const em_tensor *t);
bool emi_has_adam_step(const em_tensor *t);

/** Switches the fused slots on or off for the whole process (tests compare both paths);
 *  returns the previous setting. The default is on unless EMBER_FUSED=0. */
bool emi_fused_set(bool on);
/** Whether they are on. */
bool emi_fused_on(void);

#endif /* EMBER_OPS_FUSED_H */
