/* dist.c — collectives on ember tensors over MPI (include/ember/dist.h). Being written. */
#include "dist_internal.h"
