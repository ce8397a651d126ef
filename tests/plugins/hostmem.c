/* hostmem.c — the smallest out-of-tree backend plugin, as docs/plugins.md describes one: a
 * "hostmem" backend whose buffers are malloc'ed host memory. With EM_CAP_HOST_MEMORY it gives
 * ember only its memory slots; every kernel (copy included) is ref's. test_plugin loads it
 * through EMBER_PLUGIN_PATH. It links nothing of ember: it reaches it through `host`. */
#include <stdlib.h>
#include <string.h>

#include "ember/backend.h"

static const em_plugin_host *host;
static em_backend_ops ops;
static int ctx0;

static int hm_count(void) { return 1; }

static em_status hm_open(int index, void **ctx) {
    if (index != 0) return host->set_error(EM_ERR_DEVICE, "hostmem: one device only");
    *ctx = &ctx0;
    return EM_OK;
}

static em_status hm_alloc(void *ctx, size_t bytes, void **buf) {
    *buf = malloc(bytes ? bytes : 1);
    return *buf ? EM_OK : host->set_error(EM_ERR_NOMEM, "hostmem: out of memory");
}

static void hm_free(void *ctx, void *buf) { free(buf); }

static em_status hm_write(void *ctx, void *buf, size_t off, const void *src, size_t n) {
    memcpy((char *)buf + off, src, n);
    return EM_OK;
}

static em_status hm_read(void *ctx, const void *buf, size_t off, void *dst, size_t n) {
    memcpy(dst, (const char *)buf + off, n);
    return EM_OK;
}

EM_PLUGIN_DEFINE_ABI();

EM_PLUGIN_EXPORT em_status ember_plugin_init(const em_plugin_host *h) {
    host = h;
    int id = h->free_backend_id();
    if (id < 0) return h->set_error(EM_ERR_STATE, "hostmem: no free backend id");
    ops.abi_version = EM_BACKEND_ABI_VERSION;
    ops.name = "hostmem";
    ops.id = (em_backend)id;
    ops.caps = EM_CAP_STRIDED_INPUTS | EM_CAP_HOST_MEMORY;
    ops.device_count = hm_count;
    ops.open = hm_open;
    ops.alloc = hm_alloc;
    ops.free = hm_free;
    ops.write = hm_write;
    ops.read = hm_read;
    return h->backend_register(&ops);
}
