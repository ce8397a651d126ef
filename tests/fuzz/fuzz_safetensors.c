/*
 * fuzz_safetensors.c — libFuzzer target: em_safetensors_load_buffer on arbitrary bytes.
 * Any input must give EM_OK (and a map whose tensors can be read back) or a status with a
 * message; never a crash, a leak or undefined behaviour. Seeds: tests/fuzz/corpus/safetensors.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "ember/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    em_device dev = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    em_tensor_map *m = NULL;
    em_status s = em_safetensors_load_buffer(data, size, dev, &m);
    if (s != EM_OK) {
        if (m != NULL || em_last_error()[0] == '\0') abort();
        return 0;
    }
    for (size_t i = 0; i < em_tensor_map_size(m); i++) {
        em_tensor *t = NULL;
        if (em_tensor_map_get(m, em_tensor_map_name(m, i), &t) != EM_OK) abort();
        size_t bytes = (size_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t));
        if (bytes <= ((size_t)1 << 20)) {
            void *buf = malloc(bytes ? bytes : 1);
            if (buf != NULL && em_tensor_to_data(t, buf, bytes) != EM_OK) abort();
            free(buf);
        }
        em_tensor_release(t);
    }
    em_tensor_map_release(m);
    return 0;
}
