/*
 * stale_handle.c — a deliberate use of a released tensor handle, after another tensor was
 * created in its place. Built and run only in AddressSanitizer builds (tests/CMakeLists.txt),
 * where the test passes when ASan reports the use (heap-use-after-free, or use-after-poison)
 * and aborts the program. In a plain build the handle cache would hand the released handle's
 * memory to the new tensor, and the stale read would silently return the new tensor's data.
 */
#include <stdio.h>

#include "ember/ember.h"

int main(void) {
    const em_device ref = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    const float one = 1.0f, two = 2.0f;
    const int64_t shape[1] = {1};
    em_tensor *a = NULL, *b = NULL;
    if (em_tensor_from_data(&one, EM_F32, shape, 1, ref, &a) != EM_OK) return 2;
    em_tensor_release(a);
    /* b takes a's place in a plain build */
    if (em_tensor_from_data(&two, EM_F32, shape, 1, ref, &b) != EM_OK) return 2;
    float v = 0;
    em_status s = em_tensor_to_data(a, &v, sizeof v); /* the stale use */
    printf("stale read went unnoticed: status %s, value %g\n", em_status_name(s), (double)v);
    em_tensor_release(b);
    return 1;
}
