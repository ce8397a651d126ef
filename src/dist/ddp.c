/* ddp.c — data-parallel training over dist.c's collectives (include/ember/dist.h). Being
 * written. */
#include "dist_internal.h"
