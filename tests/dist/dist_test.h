/* dist_test.h — what the tests of tests/dist share: checks that end the whole MPI job on
 * failure (a failed rank must not leave the others waiting), per-rank inputs. Plain C with exit
 * codes rather than cmocka: a cmocka failure would go on to the next test on one rank only and
 * leave the ranks' collectives out of step. */
#ifndef EMBER_DIST_TEST_H
#define EMBER_DIST_TEST_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember/dist.h"

static int dt_rank = -1;
static int dt_checks;

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        dt_checks++;                                                                         \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "[rank %d] %s:%d: check failed: %s: ", dt_rank, __FILE__,        \
                    __LINE__, #cond);                                                        \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, "\n");                                                           \
            fflush(stderr);                                                                  \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                    \
        }                                                                                    \
    } while (0)

#define OK(call)                                                                             \
    do {                                                                                     \
        em_status s_ = (call);                                                               \
        CHECK(s_ == EM_OK, "%s -> %s: %s", #call, em_status_name(s_), em_last_error());      \
    } while (0)

#define FAILS(call, status)                                                                  \
    do {                                                                                     \
        em_status s_ = (call);                                                               \
        CHECK(s_ == (status), "%s -> %s (expected %s): %s", #call, em_status_name(s_),       \
              em_status_name(status), em_last_error());                                      \
    } while (0)

static inline double dt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* the cpu device when this build has it, else ref (both keep host memory) */
static inline em_device dt_host(void) {
    em_device dev = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    if (em_device_parse("cpu", &dev) != EM_OK) {
        em_clear_error();
        dev = (em_device){EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    }
    return dev;
}

#endif
