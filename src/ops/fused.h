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

#include "ember/backend.h"
#include "ember/ember.h"

/** *gx = gy * f'(.) for the unary op `op` (see backend.h's unary_backward for the ops and
 *  which value each reads: x, the op's input, or y, its output; pass NULL for the other).
 *  Untracked tensors of one float dtype, shape and device; params: clamp's lo and hi.
 *  *gx is a new contiguous tensor on gy's device. */
em_status emi_unary_backward(em_unary_op op, const em_tensor *x, const em_tensor *y,
                             const em_tensor *gy, const double *params, em_tensor **gx);

/** One Adam / AdamW step with the scalars `a` (backend.h), in place: param, exp_avg and
 *  exp_avg_sq (untracked, contiguous, each alone in its buffer's view, one float dtype, shape
 *  and device) are updated from grad (any layout). */
em_status emi_adam_step(em_tensor *param, em_tensor *exp_avg, em_tensor *exp_avg_sq,
                        const em_tensor *grad, const em_adam_args *a);

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
