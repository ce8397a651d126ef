/* dist_internal.h — what dist.c and ddp.c share. libember-dist uses ember's public API only
 * (ember.h, nn.h, backend.h), never src/core: it is a library over ember, like a user's. */
#ifndef EMBER_DIST_INTERNAL_H
#define EMBER_DIST_INTERNAL_H

#include <mpi.h>

#include "ember/dist.h"

#endif
