/*
 * random.c — the Vulkan backend's random kernel (shaders/random.comp): Philox-4x32-10 with
 * ref's mapping (src/backends/ref/random.c), so vulkan and ref give the same numbers for a
 * seed: bit for bit for uniform and bernoulli on devices with shaderFloat64 (computed in
 * double as ref), normal up to the device's log / cos rounding.
 */
#include <stdio.h>
#include <string.h>

#include "vk_internal.h"

em_status vk_random(void *ctx, em_random_op op, const em_view *out, uint64_t seed,
                    const double *params) {
    vk_dev *d = ctx;
    em_status s = vk_check_dtype(d, "random", out->dtype);
    if (s != EM_OK) return s;
    int64_t n = vk_numel(out);
    if (n == 0) return EM_OK;
    double p0 = params[0], p1 = op == EM_RAND_BERNOULLI ? 0 : params[1];
    vk_params p;
    memset(&p, 0, sizeof p);
    p.v[0] = vk_view(out);
    p.i[0] = op == EM_RAND_UNIFORM ? 0 : op == EM_RAND_NORMAL ? 1 : 2;
    p.i[1] = (int32_t)(uint32_t)seed;
    p.i[2] = (int32_t)(uint32_t)(seed >> 32);
    vk_set_f64(&p, 0, p0);
    vk_set_f64(&p, 1, p1);
    p.f[0] = (float)p0;
    p.f[1] = (float)p1;
    char name[32];
    snprintf(name, sizeof name, "%s.%s", d->f64 ? "random64" : "random", vk_dtype_tag(out->dtype));
    vk_buf *b = vk_vbuf(out);
    return vk_launch_1d(d, name, op == EM_RAND_NORMAL ? n : (n + 3) / 4, &p, 1, &b);
}
