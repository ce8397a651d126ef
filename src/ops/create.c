/* create.c — creating tensors, reading them back, and moving or converting them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff/autodiff.h"
#include "autodiff/rules/rules.h"

static em_status emi_check_plain_dtype(const char *fn, em_dtype dt) {
    if ((int)dt < 0 || (int)dt >= EM_DTYPE_COUNT)
        return emi_fail(EM_ERR_DTYPE, "%s: invalid dtype %d", fn, (int)dt);
    if (em_dtype_kind(dt) == EM_KIND_QUANTIZED)
        return emi_fail(EM_ERR_DTYPE, "%s: quantized dtype %s cannot be created directly; use "
                        "em_quantize", fn, em_dtype_name(dt));
    return EM_OK;
}

em_status em_tensor_from_data(const void *data, em_dtype dt, const int64_t *shape, int rank,
                              em_device dev, em_tensor **out) {
    static const char fn[] = "em_tensor_from_data";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_plain_dtype(fn, dt));
    int64_t numel;
    EMI_TRY(emi_check_shape(fn, shape, rank, &numel));
    if (numel > 0 && !data) return emi_fail(EM_ERR_ARG, "%s: data is NULL", fn);
    EMI_TRY(emi_check_device(fn, dev));
    em_tensor *t;
    EMI_TRY(emi_empty(fn, dev, dt, shape, rank, &t));
    size_t bytes = (size_t)numel * em_dtype_size(dt);
    if (bytes) {
        em_status s;
        if (dt == EM_BOOL) {
            /* Normalize bool bytes to 0/1 so kernels can trust them. */
            uint8_t *norm = malloc(bytes);
            if (!norm) {
                em_tensor_release(t);
                return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
            }
            for (size_t i = 0; i < bytes; i++) norm[i] = ((const uint8_t *)data)[i] != 0;
            s = t->st->ops->write(t->st->ctx, t->st->buf, 0, norm, bytes);
            free(norm);
        } else {
            s = t->st->ops->write(t->st->ctx, t->st->buf, 0, data, bytes);
        }
        if (s != EM_OK) {
            em_tensor_release(t);
            return s;
        }
    }
    em_status s = emi_ad_created(t, dev);
    if (s != EM_OK) {
        em_tensor_release(t);
        return s;
    }
    *out = t;
    return EM_OK;
}

em_status em_tensor_to_data(const em_tensor *t, void *dst, size_t dst_bytes) {
    static const char fn[] = "em_tensor_to_data";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    size_t need = emi_data_bytes(t);
    if (need && !dst) return emi_fail(EM_ERR_ARG, "%s: dst is NULL", fn);
    if (dst_bytes < need)
        return emi_fail(EM_ERR_ARG, "%s: dst holds %zu bytes, the tensor needs %zu", fn, dst_bytes,
                        need);
    if (!need) return EM_OK;
    void *data;
    size_t bytes;
    EMI_TRY(emi_read_all(t, &data, &bytes));
    memcpy(dst, data, bytes);
    free(data);
    return EM_OK;
}

em_status em_tensor_item(const em_tensor *t, double *out) {
    static const char fn[] = "em_tensor_item";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    EMI_TRY(emi_check_out(fn, out));
    if (emi_numel(t->v.shape, t->v.rank) != 1)
        return emi_fail(EM_ERR_SHAPE, "%s: the tensor has %lld elements, not 1", fn,
                        (long long)emi_numel(t->v.shape, t->v.rank));
    if (emi_kind(t->dtype) == EM_KIND_QUANTIZED) {
        /* its real value */
        em_tensor *f;
        EMI_TRY(em_dequantize(t, &f));
        em_status s = em_tensor_item(f, out);
        em_tensor_release(f);
        return s;
    }
    union {
        double f64;
        float f32;
        int64_t i64;
        int32_t i32;
        int16_t i16;
        int8_t i8;
        uint8_t u8;
        uint16_t u16;
    } u;
    EMI_TRY(em_tensor_to_data(t, &u, sizeof u));
    double v = 0;
    switch (t->v.dtype) {
    case EM_F32: v = u.f32; break;
    case EM_F64: v = u.f64; break;
    case EM_F16: v = em_f16_to_f32(u.u16); break;
    case EM_BF16: v = em_bf16_to_f32(u.u16); break;
    case EM_I64: v = (double)u.i64; break;
    case EM_I32: v = u.i32; break;
    case EM_I16: v = u.i16; break;
    case EM_I8: case EM_Q8: case EM_Q4: v = u.i8; break;
    case EM_U8: case EM_BOOL: v = u.u8; break;
    }
    if (em_dtype_kind(t->dtype) == EM_KIND_QUANTIZED)
        v = t->scheme.scale * (v - t->scheme.zero_point);
    *out = v;
    return EM_OK;
}

/* em_full under the name fn (em_zeros and em_ones report their own names). */
static em_status emi_full(const char *fn, const int64_t *shape, int rank, double value,
                          em_dtype dt, em_device dev, em_tensor **out) {
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_plain_dtype(fn, dt));
    EMI_TRY(emi_check_shape(fn, shape, rank, NULL));
    EMI_TRY(emi_check_device(fn, dev));
    em_tensor *t;
    EMI_TRY(emi_empty(fn, dev, dt, shape, rank, &t));
    if (emi_numel(shape, rank)) {
        em_status s = emi_need(fn, t->st->ops, t->st->ops->fill != NULL, "fill");
        if (s == EM_OK) s = t->st->ops->fill(t->st->ctx, &t->v, value);
        if (s != EM_OK) {
            em_tensor_release(t);
            return s;
        }
    }
    em_status s = emi_ad_created(t, dev);
    if (s != EM_OK) {
        em_tensor_release(t);
        return s;
    }
    *out = t;
    return EM_OK;
}

em_status em_full(const int64_t *shape, int rank, double value, em_dtype dt, em_device dev,
                  em_tensor **out) {
    return emi_full("em_full", shape, rank, value, dt, dev, out);
}

em_status em_zeros(const int64_t *shape, int rank, em_dtype dt, em_device dev, em_tensor **out) {
    return emi_full("em_zeros", shape, rank, 0.0, dt, dev, out);
}

em_status em_ones(const int64_t *shape, int rank, em_dtype dt, em_device dev, em_tensor **out) {
    return emi_full("em_ones", shape, rank, 1.0, dt, dev, out);
}

em_status em_full_like(const em_tensor *x, double value, em_tensor **out) {
    static const char fn[] = "em_full_like";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_not_quantized(fn, x));
    return emi_full(fn, x->v.shape, x->v.rank, value, x->dtype, x->dev, out);
}

em_status em_arange(double start, double stop, double step, em_dtype dt, em_device dev,
                    em_tensor **out) {
    static const char fn[] = "em_arange";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_plain_dtype(fn, dt));
    if (!isfinite(start) || !isfinite(stop) || !isfinite(step) || step == 0)
        return emi_fail(EM_ERR_ARG, "%s: start, stop and step must be finite, step nonzero", fn);
    if (dt == EM_BOOL) return emi_fail(EM_ERR_DTYPE, "%s: bool is not an arange dtype", fn);
    double n = ceil((stop - start) / step);
    if (n < 0) n = 0;
    if (n > 9.0e15) return emi_fail(EM_ERR_SHAPE, "%s: %.0f elements is too many", fn, n);
    int64_t shape[1] = {(int64_t)n};
    EMI_TRY(emi_check_device(fn, dev));
    em_tensor *t;
    EMI_TRY(emi_empty(fn, dev, dt, shape, 1, &t));
    if (shape[0]) {
        em_status s = emi_need(fn, t->st->ops, t->st->ops->arange != NULL, "arange");
        if (s == EM_OK) s = t->st->ops->arange(t->st->ctx, &t->v, start, step);
        if (s != EM_OK) {
            em_tensor_release(t);
            return s;
        }
    }
    em_status s = emi_ad_created(t, dev);
    if (s != EM_OK) {
        em_tensor_release(t);
        return s;
    }
    *out = t;
    return EM_OK;
}

/* ---- converting and moving ---- */

/* A fresh contiguous tensor of dtype dt holding t's values (t's device), recorded as `rule`. */
static em_status emi_convert(const char *fn, const em_tensor *t, em_dtype dt,
                             const emi_ad_rule *rule, em_tensor **out) {
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &t, 1, &ad));
    em_tensor *o;
    EMI_TRY(emi_empty(fn, t->dev, dt, t->v.shape, t->v.rank, &o));
    em_status s = emi_copy_into(fn, o, t);
    if (s == EM_OK) s = emi_ad_end(&ad, rule, &t, 1, o, &dt, sizeof dt);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

em_status em_cast(const em_tensor *t, em_dtype dt, em_tensor **out) {
    static const char fn[] = "em_cast";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_plain_dtype(fn, dt));
    EMI_TRY(emi_check_not_quantized(fn, t));
    if (t->dtype == dt) return emi_share(t, out);
    return emi_convert(fn, t, dt, &emi_rule_cast, out);
}

em_status em_contiguous(const em_tensor *t, em_tensor **out) {
    static const char fn[] = "em_contiguous";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    EMI_TRY(emi_check_out(fn, out));
    if (emi_view_is_contiguous(&t->v)) return emi_share(t, out);
    if (emi_qblocked(t) && t->scheme.axis != t->v.rank - 1)
        return emi_fail(EM_ERR_UNSUPPORTED, "%s: the blocks of this quantized tensor run along "
                        "dim %d: a row-major copy would cut them (em_clone keeps its layout; "
                        "or dequantize)", fn, (int)t->scheme.axis);
    return em_clone(t, out);
}

em_status em_clone(const em_tensor *t, em_tensor **out) {
    static const char fn[] = "em_clone";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    EMI_TRY(emi_check_out(fn, out));
    em_tensor *o;
    if (emi_qblocked(t)) {
        EMI_TRY(emi_qclone(fn, t, t->dev, &o));
        em_status s = emi_ad_created(o, t->dev);
        if (s != EM_OK) {
            em_tensor_release(o);
            return s;
        }
        *out = o;
        return EM_OK;
    }
    EMI_TRY(emi_convert(fn, t, t->v.dtype, &emi_rule_clone, &o));
    o->dtype = t->dtype;
    o->scheme = t->scheme;
    *out = o;
    return EM_OK;
}

em_status em_to_device(const em_tensor *t, em_device dev, em_tensor **out) {
    static const char fn[] = "em_to_device";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_device(fn, dev));
    if (em_device_equal(t->dev, dev)) return emi_share(t, out);
    const char *what = NULL;
    const bool record = em_is_grad_enabled();
    if (record && !dev.autodiff && emi_ad_in_graph(t, &what)) {
        char dn[64] = "?";
        em_device_name(dev, dn, sizeof dn);
        return emi_fail(EM_ERR_STATE,
                        "%s: the tensor is tracked (%s%s); on %s, a device without autodiff, it "
                        "would be cut from the graph: em_tensor_detach it first (or move it in a "
                        "no-grad scope)", fn, strchr(what, ' ') ? "" : "the result of ", what,
                        dn);
    }
    em_tensor *o = NULL;
    if (t->dev.backend == dev.backend && t->dev.index == dev.index) {
        /* Same memory, another autodiff wrapping: a view over the same storage. */
        EMI_TRY(emi_view_tensor(t, t->v.shape, t->v.strides, t->v.rank, t->v.offset, &o));
    } else if ((t->st->ops->caps & EM_CAP_HOST_MEMORY) &&
               (em_backend_get(dev.backend)->caps & EM_CAP_HOST_MEMORY) &&
               dev.backend != EM_BACKEND_CAPTURE && t->st->ops->id != EM_BACKEND_CAPTURE) {
        /* Both sides keep their buffers in host memory: the new tensor reads t's. */
        EMI_TRY(emi_borrow_tensor(fn, t, dev, &o));
    } else if (emi_qblocked(t)) {
        EMI_TRY(emi_qclone(fn, t, dev, &o));
    } else {
        void *data;
        size_t bytes;
        EMI_TRY(emi_read_all(t, &data, &bytes));
        em_status s = emi_empty(fn, dev, t->v.dtype, t->v.shape, t->v.rank, &o);
        if (s == EM_OK && bytes) s = o->st->ops->write(o->st->ctx, o->st->buf, 0, data, bytes);
        free(data);
        if (s != EM_OK) {
            em_tensor_release(o);
            return s;
        }
        o->dtype = t->dtype;
        o->scheme = t->scheme;
    }
    o->ad = NULL;
    o->dev = dev;
    o->ckpt = EM_CKPT_NONE;
    em_status s;
    if (t->ad && record && dev.autodiff && emi_kind(t->dtype) == EM_KIND_FLOAT) {
        /* Tracked on both sides: gradients flow back to the source device. */
        emi_ad_op ad = {true, dev.checkpointing, dev};
        em_device src = t->dev;
        src.autodiff = false;
        src.checkpointing = EM_CKPT_NONE;
        s = emi_ad_end(&ad, &emi_rule_to_device, &t, 1, o, &src, sizeof src);
    } else {
        /* Untracked on arrival: a leaf (a constant) when dev is an autodiff device. */
        s = emi_ad_created(o, dev);
        if (s == EM_OK && !dev.autodiff && emi_kind(t->dtype) == EM_KIND_FLOAT) o->ckpt = t->ckpt;
    }
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

