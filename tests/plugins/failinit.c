/* failinit.c — a plugin whose initialization fails (as one whose driver finds no device):
 * ember must report its status and message and leave nothing registered. */
#include "ember/backend.h"

EM_PLUGIN_DEFINE_ABI();

EM_PLUGIN_EXPORT em_status ember_plugin_init(const em_plugin_host *h) {
    return h->set_error(EM_ERR_BACKEND, "failinit: the driver found no device");
}
