/* badabi.c — a plugin built for another backend ABI: ember must refuse it before calling it. */
#include "ember/backend.h"

EM_PLUGIN_EXPORT const uint32_t ember_plugin_abi = EM_BACKEND_ABI_VERSION + 1000;

EM_PLUGIN_EXPORT em_status ember_plugin_init(const em_plugin_host *h) {
    /* never reached: ember reads the ABI first */
    return h->set_error(EM_ERR_STATE, "badabi: init was called");
}
