/* adam.c — the graph-only adam_step call at replay (adam.h): the step count read from the
 * graph, the step's scalars computed on the host by the function the eager step uses, the
 * device's kernel or the eager composition, the count advanced. */
#include <stdint.h>
#include <string.h>

#include "ops/fused.h"
#include "wire/adam.h"

em_status rs_adam_step(const em_backend_ops *o, void *ctx, const rw_kernel *k,
                       em_view *const v[RW_MAX_VIEWS]) {
    const double *D = k->doubles; /* lr beta1 beta2 eps weight_decay grad_scale */
    const em_view *sv = v[4];
    const size_t off = (size_t)sv->offset * sizeof(int64_t);
    int64_t t = 0;
    em_status s = EM_OK;
    if (o->caps & EM_CAP_HOST_MEMORY) memcpy(&t, (const char *)sv->buf + off, sizeof t);
    else s = o->read(ctx, sv->buf, off, &t, sizeof t);
    if (s != EM_OK) return s;
    if (t < 0 || t == INT64_MAX)
        return em_backend_set_error(EM_ERR_ARG, "the step count %lld is out of range",
                                    (long long)t);
    const bool adamw = k->sub == 1;
    const em_adam_args a = emi_adam_args_of(adamw, D[0], D[1], D[2], D[3], D[4], t + 1, D[5]);
    int64_t n = 1;
    for (int d = 0; d < v[0]->rank; d++) n *= v[0]->shape[d];
    if (n > 0) {
        /* as the eager step chooses (src/nn/optim.c: nn_adam_fused, then nn_update) */
        s = EM_ERR_UNSUPPORTED;
        if (o->adam_step && emi_fused_on()) s = o->adam_step(ctx, v[0], v[1], v[2], v[3], &a);
        if (s == EM_ERR_UNSUPPORTED)
            s = emi_adam_compose(o, ctx, v[0], v[1], v[2], v[3], &a, adamw && D[4] != 0);
        if (s != EM_OK) return s;
    }
    t++;
    if (o->caps & EM_CAP_HOST_MEMORY) {
        memcpy((char *)sv->buf + off, &t, sizeof t);
        return EM_OK;
    }
    return o->write(ctx, sv->buf, off, &t, sizeof t);
}
