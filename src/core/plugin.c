/* plugin.c — backends in shared modules, found in plugin directories and loaded at run time
 * (ember.h's em_plugin_load, backend.h's em_plugin_host; docs/plugins.md).
 *
 * The directories are searched once, at the first call that needs them; finding a module costs
 * a directory listing, loading it happens only when its backend is asked for. A module's state
 * goes found -> loading -> done (with the status its load ended with), under one recursive
 * lock: a plugin's initialization may itself ask for devices. */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"

#ifndef EMBER_PLUGIN_DIR
#define EMBER_PLUGIN_DIR ""
#endif

#define EMI_MAX_PLUGINS 32
#define EMI_PLUGIN_DIRS 16

enum { EMI_PLUG_FOUND = 0, EMI_PLUG_LOADING, EMI_PLUG_DONE };

typedef struct emi_plugin {
    em_plugin_info info;
    int state;
    void *handle; /* kept open while it holds registered backends */
} emi_plugin;

static pthread_mutex_t emi_plug_lock;
static pthread_once_t emi_plug_lock_once = PTHREAD_ONCE_INIT;
static emi_plugin emi_plugs[EMI_MAX_PLUGINS];
static int emi_nplugs;
static bool emi_scanned;
static char emi_dirs[EMI_PLUGIN_DIRS][PATH_MAX];
static int emi_ndirs;
/* The module being initialized (under the lock): what it registers is named after it. */
static emi_plugin *emi_loading;

static void emi_plug_lock_init(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&emi_plug_lock, &a);
    pthread_mutexattr_destroy(&a);
}

static void emi_plug_enter(void) {
    pthread_once(&emi_plug_lock_once, emi_plug_lock_init);
    pthread_mutex_lock(&emi_plug_lock);
}

static void emi_plug_leave(void) { pthread_mutex_unlock(&emi_plug_lock); }

/* True for a backend name a plugin file may carry: 1..31 of [A-Za-z0-9_]. */
static bool emi_plugin_name_ok(const char *s, size_t n) {
    if (n == 0 || n >= sizeof(((em_plugin_info *)0)->name)) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return false;
    }
    return true;
}

/* The NAME of "libember-NAME.so", or NULL (length in *n). */
static const char *emi_plugin_file_name(const char *file, size_t *n) {
    static const char pre[] = "libember-", suf[] = ".so";
    size_t len = strlen(file), lp = sizeof pre - 1, ls = sizeof suf - 1;
    if (len <= lp + ls || strncmp(file, pre, lp) != 0 || strcmp(file + len - ls, suf) != 0)
        return NULL;
    *n = len - lp - ls;
    return emi_plugin_name_ok(file + lp, *n) ? file + lp : NULL;
}

static emi_plugin *emi_plugin_by_name(const char *name, size_t n) {
    for (int i = 0; i < emi_nplugs; i++)
        if (strlen(emi_plugs[i].info.name) == n && strncmp(emi_plugs[i].info.name, name, n) == 0)
            return &emi_plugs[i];
    return NULL;
}

/* A new entry (NULL when the table is full or the path does not fit). */
static emi_plugin *emi_plugin_add(const char *name, size_t n, const char *path) {
    size_t pl = strlen(path);
    if (emi_nplugs >= EMI_MAX_PLUGINS || pl >= sizeof emi_plugs[0].info.path) return NULL;
    emi_plugin *p = &emi_plugs[emi_nplugs++];
    memset(p, 0, sizeof *p);
    memcpy(p->info.name, name, n);
    p->info.name[n] = '\0';
    memcpy(p->info.path, path, pl + 1);
    return p;
}

static void emi_add_dir(const char *d, size_t n) {
    if (n == 0 || n >= PATH_MAX || emi_ndirs >= EMI_PLUGIN_DIRS) return;
    for (int i = 0; i < emi_ndirs; i++)
        if (strlen(emi_dirs[i]) == n && strncmp(emi_dirs[i], d, n) == 0) return;
    memcpy(emi_dirs[emi_ndirs], d, n);
    emi_dirs[emi_ndirs][n] = '\0';
    emi_ndirs++;
}

/* "<the folder of the module holding this code>/ember": lib/ember beside an installed
 * libember.so, <build>/ember beside the programs of a build tree. */
static void emi_add_module_dir(void) {
    Dl_info di;
    char path[PATH_MAX], real[PATH_MAX];
    path[0] = '\0';
    if (dladdr((void *)&em_plugin_load, &di) && di.dli_fname && realpath(di.dli_fname, real))
        snprintf(path, sizeof path, "%s", real);
    if (!path[0]) {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        path[n > 0 ? n : 0] = '\0';
    }
    char *slash = strrchr(path, '/');
    if (!slash) return;
    *slash = '\0';
    char dir[PATH_MAX];
    int n = snprintf(dir, sizeof dir, "%s/ember", path);
    if (n > 0 && n < (int)sizeof dir) emi_add_dir(dir, (size_t)n);
}

/* Lists the plugin directories and the modules in them (under the lock, once). */
static void emi_plugin_scan(void) {
    if (emi_scanned) return;
    emi_scanned = true;
    const char *env = secure_getenv("EMBER_PLUGIN_PATH");
    for (const char *p = env; p && *p;) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        emi_add_dir(p, n);
        p += n + (e ? 1 : 0);
    }
    emi_add_module_dir();
    emi_add_dir(EMBER_PLUGIN_DIR, strlen(EMBER_PLUGIN_DIR));
    for (int d = 0; d < emi_ndirs; d++) {
        /* Sorted, so that which file a name gets does not depend on the directory's order. */
        struct dirent **ents = NULL;
        int n = scandir(emi_dirs[d], &ents, NULL, alphasort);
        for (int i = 0; i < n; i++) {
            size_t nl;
            const char *name = emi_plugin_file_name(ents[i]->d_name, &nl);
            size_t dl = strlen(emi_dirs[d]), fl = strlen(ents[i]->d_name);
            char path[PATH_MAX];
            if (name && dl + 1 + fl < sizeof path && !emi_plugin_by_name(name, nl)) {
                memcpy(path, emi_dirs[d], dl);
                path[dl] = '/';
                memcpy(path + dl + 1, ents[i]->d_name, fl + 1);
                emi_plugin_add(name, nl, path);
            }
            free(ents[i]);
        }
        free(ents);
    }
}

/* ---- the host table a plugin gets ---- */

static em_status emi_host_register(const em_backend_ops *ops) {
    em_status s = em_backend_register(ops);
    if (s == EM_OK && emi_loading && ops && ops->name && !emi_loading->info.name[0])
        snprintf(emi_loading->info.name, sizeof emi_loading->info.name, "%s", ops->name);
    return s;
}

static em_status emi_host_set_error(em_status s, const char *msg) {
    return emi_fail(s, "%s", msg ? msg : "(no message)");
}

static int emi_host_free_id(void) {
    for (int i = EM_BACKEND_EXTERNAL0; i < EM_BACKEND_MAX; i++)
        if (!em_backend_get((em_backend)i)) return i;
    return -1;
}

static const em_plugin_host emi_host = {
    .abi_version = EM_BACKEND_ABI_VERSION,
    .backend_register = emi_host_register,
    .set_error = emi_host_set_error,
    .free_backend_id = emi_host_free_id,
    .backend_get = em_backend_get,
};

static int emi_count_backends(void) {
    int n = 0;
    for (int i = 0; i < EM_BACKEND_MAX; i++) n += em_backend_get((em_backend)i) != NULL;
    return n;
}

/* Records how p's load ended (message from this thread's error) and returns s. */
static em_status emi_plugin_end(emi_plugin *p, em_status s) {
    p->state = EMI_PLUG_DONE;
    p->info.loaded = true;
    p->info.status = s;
    if (s == EM_OK) p->info.message[0] = '\0';
    else snprintf(p->info.message, sizeof p->info.message, "%s", em_last_error());
    return s;
}

/* Loads p (state FOUND) under the lock. */
static em_status emi_plugin_do_load(emi_plugin *p) {
    p->state = EMI_PLUG_LOADING;
    const char *path = p->info.path;
    if (access(path, F_OK) != 0)
        return emi_plugin_end(p, emi_fail(EM_ERR_IO, "plugin %s: no such file", path));
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        return emi_plugin_end(p, emi_fail(EM_ERR_IO, "plugin %s: cannot be loaded: %s", path,
                                          e ? e : "unknown error"));
    }
    const uint32_t *abi = (const uint32_t *)dlsym(h, "ember_plugin_abi");
    em_plugin_init_fn init;
    void *sym = dlsym(h, "ember_plugin_init");
    memcpy(&init, &sym, sizeof init);
    if (!abi || !init) {
        dlclose(h);
        return emi_plugin_end(p, emi_fail(EM_ERR_UNSUPPORTED,
                                          "plugin %s: not an ember plugin (it does not export %s)",
                                          path, !abi ? "ember_plugin_abi" : "ember_plugin_init"));
    }
    if (*abi != EM_BACKEND_ABI_VERSION) {
        uint32_t got = *abi;
        dlclose(h);
        return emi_plugin_end(p, emi_fail(EM_ERR_UNSUPPORTED,
                                          "plugin %s: built for backend ABI %u, this library "
                                          "speaks %u: rebuild it against this ember",
                                          path, got, EM_BACKEND_ABI_VERSION));
    }
    int before = emi_count_backends();
    emi_plugin *outer = emi_loading;
    emi_loading = p;
    emi_fail(EM_OK, "%s", "");
    em_status s = init(&emi_host);
    emi_loading = outer;
    if (s == EM_OK && emi_count_backends() == before)
        s = emi_fail(EM_ERR_UNSUPPORTED, "plugin %s: its initialization registered no backend",
                     path);
    else if (s != EM_OK) {
        char msg[384];
        snprintf(msg, sizeof msg, "%s", em_last_error());
        s = emi_fail(s, "plugin %s: its initialization failed: %s", path,
                     msg[0] ? msg : em_status_name(s));
    }
    if (s != EM_OK) {
        /* A module whose table got registered before it failed stays mapped: the table
         * must outlive its use. */
        if (emi_count_backends() == before) dlclose(h);
        else p->handle = h;
        return emi_plugin_end(p, s);
    }
    p->handle = h;
    return emi_plugin_end(p, EM_OK);
}

/* The status of p: loads it when found and not tried yet. */
static em_status emi_plugin_ensure(emi_plugin *p) {
    if (p->state == EMI_PLUG_FOUND) return emi_plugin_do_load(p);
    if (p->state == EMI_PLUG_LOADING)
        return emi_fail(EM_ERR_STATE, "plugin %s: asked for while it initializes", p->info.path);
    if (p->info.status == EM_OK) return EM_OK;
    return emi_fail(p->info.status, "%s", p->info.message);
}

em_status em_plugin_load(const char *path) {
    static const char fn[] = "em_plugin_load";
    if (!path || !path[0]) return emi_fail(EM_ERR_ARG, "%s: path is NULL or empty", fn);
    if (strlen(path) >= sizeof(((em_plugin_info *)0)->path))
        return emi_fail(EM_ERR_ARG, "%s: path longer than %zu bytes", fn,
                        sizeof(((em_plugin_info *)0)->path) - 1);
    emi_plug_enter();
    emi_plugin_scan();
    char real[PATH_MAX];
    const char *key = realpath(path, real) ? real : path;
    emi_plugin *p = NULL;
    for (int i = 0; i < emi_nplugs && !p; i++) {
        char r2[PATH_MAX];
        const char *k2 = realpath(emi_plugs[i].info.path, r2) ? r2 : emi_plugs[i].info.path;
        if (strcmp(k2, key) == 0) p = &emi_plugs[i];
    }
    em_status s;
    if (!p) {
        /* Named after its file when it follows the convention; else after what it registers. */
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        size_t nl = 0;
        const char *name = emi_plugin_file_name(base, &nl);
        if (name && emi_plugin_by_name(name, nl)) name = NULL, nl = 0; /* another file has it */
        p = emi_plugin_add(name ? name : "", name ? nl : 0, path);
    }
    if (!p) s = emi_fail(EM_ERR_NOMEM, "%s: more than %d plugins", fn, EMI_MAX_PLUGINS);
    else s = emi_plugin_ensure(p);
    emi_plug_leave();
    return s == EM_OK ? EM_OK : emi_fail_prefixed(s, fn);
}

em_status em_plugins(em_plugin_info *list, size_t cap, size_t *count) {
    static const char fn[] = "em_plugins";
    if (!count) return emi_fail(EM_ERR_ARG, "%s: count is NULL", fn);
    if (cap > 0 && !list) return emi_fail(EM_ERR_ARG, "%s: list is NULL with cap %zu", fn, cap);
    emi_plug_enter();
    emi_plugin_scan();
    for (int i = 0; i < emi_nplugs && (size_t)i < cap; i++) list[i] = emi_plugs[i].info;
    *count = (size_t)emi_nplugs;
    emi_plug_leave();
    return EM_OK;
}

em_status emi_plugin_autoload(const char *name, size_t n, bool *absent) {
    emi_plug_enter();
    emi_plugin_scan();
    emi_plugin *p = emi_plugin_name_ok(name, n) ? emi_plugin_by_name(name, n) : NULL;
    *absent = !p;
    em_status s;
    if (p) {
        s = emi_plugin_ensure(p);
    } else {
        char dirs[1024] = "";
        size_t used = 0;
        for (int i = 0; i < emi_ndirs && used < sizeof dirs; i++) {
            int w = snprintf(dirs + used, sizeof dirs - used, "%s%s", i ? ", " : "", emi_dirs[i]);
            if (w > 0) used += (size_t)w;
        }
        s = emi_fail(EM_ERR_DEVICE, "no plugin libember-%.*s.so in %s%s", (int)n, name,
                     emi_ndirs ? dirs : "any plugin directory",
                     secure_getenv("EMBER_PLUGIN_PATH") ? "" : " (EMBER_PLUGIN_PATH is unset)");
    }
    emi_plug_leave();
    return s;
}

void emi_plugin_load_all(void) {
    char saved[512];
    snprintf(saved, sizeof saved, "%s", em_last_error());
    emi_plug_enter();
    emi_plugin_scan();
    for (int i = 0; i < emi_nplugs; i++)
        if (emi_plugs[i].state == EMI_PLUG_FOUND) emi_plugin_do_load(&emi_plugs[i]);
    emi_plug_leave();
    emi_fail(EM_OK, "%s", saved); /* a plugin that failed is not this call's error */
}
