/*
 * fuzz_safetensors.c — libFuzzer target: em_safetensors_load_buffer on arbitrary bytes.
 * Any input must give EM_OK (and a map whose tensors can be read back) or a status with a
 * message; never a crash, a leak or undefined behaviour. A map that loads must hold names that
 * are valid UTF-8 (checked here by a decoder of its own, not the library's) and that each find
 * a tensor of their own. A quantized tensor (the "ember.quant.<name>" metadata) must report a
 * scheme, give back its layout's bytes (a "transposed" one through its transpose) and
 * dequantize. Seeds: tests/fuzz/corpus/safetensors
 * (quant_*.safetensors: quantized tensors of every scheme, written by em_safetensors_save).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "ember/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Well-formed UTF-8 by decoding: each sequence's length from its lead byte, its value in the
 * range that length may encode, no surrogates. */
static bool utf8_ok(const char *str) {
    const uint8_t *s = (const uint8_t *)str;
    while (*s) {
        uint32_t cp, min;
        int n;
        if (*s < 0x80) n = 1, cp = *s, min = 0;
        else if ((*s & 0xE0) == 0xC0) n = 2, cp = *s & 0x1F, min = 0x80;
        else if ((*s & 0xF0) == 0xE0) n = 3, cp = *s & 0x0F, min = 0x800;
        else if ((*s & 0xF8) == 0xF0) n = 4, cp = *s & 0x07, min = 0x10000;
        else return false;
        for (int i = 1; i < n; i++) {
            if ((s[i] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        s += n;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    em_device dev = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    em_tensor_map *m = NULL;
    em_status s = em_safetensors_load_buffer(data, size, dev, &m);
    if (s != EM_OK) {
        if (m != NULL || em_last_error()[0] == '\0') abort();
        return 0;
    }
    size_t n = em_tensor_map_size(m);
    em_tensor **seen = calloc(n ? n : 1, sizeof *seen);
    if (seen == NULL) abort();
    for (size_t i = 0; i < n; i++) {
        const char *name = em_tensor_map_name(m, i);
        if (name == NULL || !utf8_ok(name)) abort();
        em_tensor *t = NULL;
        if (em_tensor_map_get(m, name, &t) != EM_OK) abort();
        for (size_t j = 0; j < i; j++)
            if (seen[j] == t) abort(); /* two names, one tensor: a duplicate got through */
        seen[i] = t;
        size_t bytes = (size_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t));
        bool quantized = em_tensor_kind(t) == EM_KIND_QUANTIZED;
        em_tensor *bt = NULL; /* what gives the bytes: a "transposed" one's transpose */
        if (quantized) {
            em_quant_scheme sc;
            if (em_tensor_scheme(t, &sc) != EM_OK) abort();
            const int r = em_tensor_rank(t);
            if ((sc.kind == EM_QK_BLOCK || sc.kind == EM_QK_BLOCK_MIN) && sc.axis != r - 1 &&
                (em_transpose(t, sc.axis, r - 1, &bt) != EM_OK ||
                 em_tensor_scheme(bt, &sc) != EM_OK))
                abort();
            const em_tensor *b = bt ? bt : t;
            if (em_quant_nbytes(&sc, em_tensor_shape(b), em_tensor_rank(b), &bytes) != EM_OK)
                abort();
        }
        if (bytes <= ((size_t)1 << 20)) {
            void *buf = malloc(bytes ? bytes : 1);
            if (buf != NULL && em_tensor_to_data(bt ? bt : t, buf, bytes) != EM_OK) abort();
            free(buf);
            em_tensor *d = NULL;
            if (quantized && em_dequantize(t, &d) != EM_OK) abort();
            em_tensor_release(d);
        }
        em_tensor_release(bt);
    }
    for (size_t i = 0; i < n; i++) em_tensor_release(seen[i]);
    free(seen);
    em_tensor_map_release(m);
    return 0;
}
