/*
 * The norm family's wrappers for the conformance runner: batch_norm, group_norm, rms_norm.
 *
 * Params:
 *   batch_norm: inputs x[, weight][, bias][, running_mean, running_var]; "weight", "bias",
 *     "running" (bools saying which are present, default false), "training" (default true),
 *     "momentum" (0.1), "eps" (1e-5); "running_mean_only": x, running_mean (an error case).
 *     Outputs: y, then (with "running") running_mean and running_var as the call left them.
 *   group_norm: inputs x[, weight][, bias]; "groups", "eps", "weight", "bias".
 *   rms_norm: inputs x[, weight]; "ndim", "eps", "weight".
 */
#include <stddef.h>

#include "conformance.h"

static em_status w_batch_norm(em_tensor *const *in, int nin, const conf_params *p,
                              em_tensor **out, int *nout) {
    (void)nin;
    bool hw = conf_bool(p, "weight", false), hb = conf_bool(p, "bias", false),
         hr = conf_bool(p, "running", false);
    int k = 1;
    const em_tensor *w = hw ? in[k++] : NULL;
    const em_tensor *b = hb ? in[k++] : NULL;
    em_tensor *rm = NULL, *rv = NULL;
    if (hr) {
        rm = in[k++];
        rv = in[k++];
    }
    if (conf_bool(p, "running_mean_only", false)) rm = in[k++];
    *nout = 1;
    em_status s = em_batch_norm(in[0], rm, rv, w, b, conf_bool(p, "training", true),
                                conf_f64(p, "momentum", 0.1), conf_f64(p, "eps", 1e-5),
                                &out[0]);
    if (s == EM_OK && hr) {
        em_tensor_retain(rm);
        em_tensor_retain(rv);
        out[1] = rm;
        out[2] = rv;
        *nout = 3;
    }
    return s;
}

static em_status w_group_norm(em_tensor *const *in, int nin, const conf_params *p,
                              em_tensor **out, int *nout) {
    (void)nin;
    bool hw = conf_bool(p, "weight", false), hb = conf_bool(p, "bias", false);
    int k = 1;
    const em_tensor *w = hw ? in[k++] : NULL;
    const em_tensor *b = hb ? in[k++] : NULL;
    *nout = 1;
    return em_group_norm(in[0], conf_int(p, "groups", 1), w, b, conf_f64(p, "eps", 1e-5),
                         &out[0]);
}

static em_status w_rms_norm(em_tensor *const *in, int nin, const conf_params *p,
                            em_tensor **out, int *nout) {
    (void)nin;
    const em_tensor *w = conf_bool(p, "weight", false) ? in[1] : NULL;
    *nout = 1;
    return em_rms_norm(in[0], (int)conf_int(p, "ndim", 1), w, conf_f64(p, "eps", 1e-5),
                       &out[0]);
}

const conf_op conf_ops_norm[] = {
    {"batch_norm", w_batch_norm},
    {"group_norm", w_group_norm},
    {"rms_norm", w_rms_norm},
    {NULL, NULL},
};
