/* test_dist_timeout — a collective that a rank reaches late fails on the others with
 * EM_ERR_BACKEND naming that rank, within the timeout (EMBER_DIST_TIMEOUT, then
 * em_dist_set_timeout); the communicator then refuses collectives (EM_ERR_STATE); the late
 * rank's collective still completes. */
#include <stdlib.h>
#include <unistd.h>

#include "dist_test.h"

static void late_rank(em_dist *d, double timeout, int late, bool barrier, const char *label) {
    int r = em_dist_rank(d);
    float v = (float)(r + 1);
    em_tensor *t = NULL;
    OK(em_tensor_from_data(&v, EM_F32, NULL, 0, dt_host(), &t));
    if (r == late) {
        usleep((useconds_t)((timeout + 1.5) * 1e6)); /* past the others' timeout */
        /* the others have given up, but their collective is still posted with MPI: this one
         * completes as soon as they drive MPI's progress (their MPI_Barrier below) */
        if (barrier) OK(em_barrier(d));
        else OK(em_all_reduce(d, t, EM_DIST_SUM));
    } else {
        double t0 = dt_now();
        em_status s = barrier ? em_barrier(d) : em_all_reduce(d, t, EM_DIST_SUM);
        double el = dt_now() - t0;
        char want[64];
        snprintf(want, sizeof want, "rank %d did not reach it", late);
        CHECK(s == EM_ERR_BACKEND, "%s: %s, expected EM_ERR_BACKEND", label, em_status_name(s));
        CHECK(strstr(em_last_error(), want), "%s: the message names rank %d: %s", label, late,
              em_last_error());
        CHECK(el >= timeout * 0.95 && el < timeout + 2.0, "%s: failed after %.2f s (timeout %g)",
              label, el, timeout);
        if (r == 0) printf("test_dist_timeout: %s: after %.2f s: %s\n", label, el, em_last_error());
        /* the communicator is out of step now */
        FAILS(em_all_reduce(d, t, EM_DIST_SUM), EM_ERR_STATE);
        FAILS(em_barrier(d), EM_ERR_STATE);
    }
    em_tensor_release(t);
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    setenv("EMBER_DIST_TIMEOUT", "1", 1);
    em_dist *d = NULL;
    if (em_dist_init(&argc, &argv, &d) != EM_OK) {
        fprintf(stderr, "em_dist_init: %s\n", em_last_error());
        return 1;
    }
    dt_rank = em_dist_rank(d);
    int n = em_dist_size(d);
    /* EMBER_DIST_TIMEOUT=1: the last rank comes 2.5 s late to an all_reduce */
    OK(em_barrier(d));
    late_rank(d, 1.0, n - 1, false, "EMBER_DIST_TIMEOUT=1, all_reduce");
    /* em_dist_set_timeout(0.5): rank 1 comes late to a barrier, on a new communicator (made
     * before the first is freed: freeing the last one would finalize MPI) */
    em_dist *d2 = NULL;
    MPI_Comm world = MPI_COMM_WORLD;
    OK(em_dist_from_comm(&world, &d2));
    em_dist_free(d);
    d = d2;
    OK(em_dist_set_timeout(d, 0.5));
    OK(em_barrier(d));
    late_rank(d, 0.5, 1, true, "em_dist_set_timeout(0.5), barrier");
    em_dist_free(d); /* the last one: finalizes MPI, which em_dist_init started */
    if (dt_rank == 0) printf("test_dist_timeout: PASS\n");
    return 0;
}
