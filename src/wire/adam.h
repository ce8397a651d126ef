/*
 * adam.h — the graph-only adam_step call at replay: one Adam / AdamW step whose step count is
 * a tensor of the graph (what a captured em_optimizer_step records). Private to ember.
 */
#ifndef EMBER_WIRE_ADAM_H
#define EMBER_WIRE_ADAM_H

#include "wire/wire.h"

/** Runs a checked RW_K_ADAM_STEP call k on the device (ops, ctx): reads the step count t
 *  from v[4], computes step t + 1's scalars on the host as the eager step does
 *  (emi_adam_args_of), runs the device's adam_step kernel when it has one (and fused
 *  kernels are on), else, or when the kernel declines the case, the eager composition
 *  (emi_adam_compose); then writes t + 1 into v[4]. EM_ERR_ARG for a count below 0 or at
 *  INT64_MAX. */
em_status rs_adam_step(const em_backend_ops *ops, void *ctx, const rw_kernel *k,
                       em_view *const v[RW_MAX_VIEWS]);

#endif /* EMBER_WIRE_ADAM_H */
