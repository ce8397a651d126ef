/*
 * exit_queued.c — queues work of several programs not yet built on opencl:0 and returns from
 * main without reading anything, so that the process exits with work in the queue (and, on a
 * cold driver cache, with the driver still compiling). Exit must wait for that work: PoCL
 * compiles on a thread of its own, and exit runs LLVM's destructors under it otherwise.
 * Prints "queued" and exits 0; exits 77 (skipped) without an OpenCL device.
 * Run by exit_queued.sh with empty caches, several times.
 */
#include <stdio.h>

#include "ember/ember.h"

int main(void) {
    em_device dev;
    if (em_device_parse("opencl:0", &dev) != EM_OK) {
        printf("exit_queued: no opencl:0 (%s): skipped\n", em_last_error());
        return 77;
    }
    const int64_t shape[2] = {96, 96};
    const em_dtype dts[] = {EM_F32, EM_F64, EM_I32, EM_F16, EM_I64, EM_BF16};
    enum { NDT = sizeof dts / sizeof *dts };
    em_tensor *t[3 * NDT] = {0};
    int rc = 0;
    for (size_t i = 0; i < NDT && rc == 0; i++) {
        em_tensor **a = &t[3 * i], **m = &t[3 * i + 1], **e = &t[3 * i + 2];
        if (em_full(shape, 2, dts[i], 1.5, dev, a) != EM_OK) {
            if (dts[i] == EM_F64) continue; /* a device without cl_khr_fp64 */
            fprintf(stderr, "exit_queued: em_full: %s\n", em_last_error());
            rc = 1;
        } else if (em_matmul(*a, *a, m) != EM_OK || em_mul(*a, *m, e) != EM_OK) {
            fprintf(stderr, "exit_queued: %s\n", em_last_error());
            rc = 1;
        }
    }
    /* released without reading anything: releasing waits for nothing, so the work stays
     * queued when main returns */
    for (size_t i = 0; i < 3 * NDT; i++) em_tensor_release(t[i]);
    if (rc == 0) printf("queued\n");
    return rc;
}
