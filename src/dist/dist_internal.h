/* dist_internal.h — what dist.c and ddp.c share. libember-dist uses ember's public API only
 * (ember.h, nn.h, backend.h), never src/core: it is a library over ember, like a user's. */
#ifndef EMBER_DIST_INTERNAL_H
#define EMBER_DIST_INTERNAL_H

#include <mpi.h>

#include "ember/dist.h"

/** The MPI communicator em_dist runs its collectives on (its private duplicate, with
 *  MPI_ERRORS_RETURN): for code of the library that needs MPI directly. MPI_COMM_NULL for
 *  NULL. Traffic on it must follow the collectives' order rules (every rank the same calls in
 *  the same order), or it will be matched with ember's own collectives. */
MPI_Comm emd_comm(const em_dist *d);

/** Sets em_last_error to "fn: what failed: MPI's message for code" and returns
 *  EM_ERR_BACKEND. */
em_status emd_mpi_error(const char *fn, const char *what, int code);

#endif
