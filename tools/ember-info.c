/*
 * ember-info — what this build of ember has: its version, the backends compiled in, the
 * devices present on this machine, the default device, and for each backend the kernels it
 * implements natively (the non-NULL slots of its em_backend_ops). With the cpu backend: the
 * instruction-set level its kernels run (EMBER_CPU_ISA) and OpenBLAS's build and kernel, with a
 * warning when OpenBLAS runs a pre-AVX2 kernel on a CPU with AVX2 or AVX-512.
 *
 * Usage: ember-info
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/backend.h"
#include "ember/ember.h"

#ifdef EMBER_WITH_CPU
#include "backends/cpu/fallback.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/quant.h"
#endif
#ifdef EMBER_HAVE_OPENBLAS
char *openblas_get_config(void);
char *openblas_get_corename(void);
#endif

/** One slot of the table: its name, whether the backend fills it, and for slots that take
 *  an op enum, how many ops that enum has (0 otherwise). */
typedef struct slot {
    const char *name;
    bool present;
    int ops;
} slot;

/** Lists the kernel slots of `o` into out (at most cap); returns how many. */
static int list_slots(const em_backend_ops *o, slot *out, int cap) {
#define S(field, nops) {#field, o->field != NULL, nops}
    const slot all[] = {
        S(fill, 0),          S(arange, 0),        S(random, EM_RAND_COUNT), S(copy, 0),
        S(unary, EM_UN_COUNT), S(binary, EM_BIN_COUNT), S(binary_scalar, EM_BIN_COUNT),
        S(where, 0),         S(reduce, EM_RED_COUNT), S(cumsum, 0),
        S(softmax, 0),       S(matmul, 0),        S(gather, 0),
        S(scatter_add, 0),   S(index_select, 0),  S(sort, 0),
        S(conv2d, 0),        S(conv_transpose2d, 0), S(max_pool2d, 0),
        S(avg_pool2d, 0),    S(adaptive_avg_pool2d, 0), S(layer_norm, 0),
        S(conv2d_weight_grad, 0), S(avg_pool2d_backward, 0),
        S(adaptive_avg_pool2d_backward, 0),
        S(unary_backward, 0), S(adam_step, 0),
        S(batch_norm, 0),    S(batch_norm_backward, 0), S(group_norm, 0), S(rms_norm, 0),
        S(cumulative, EM_CUM_COUNT), S(sdpa, 0), S(sdpa_backward, 0),
    };
#undef S
    int n = (int)(sizeof all / sizeof all[0]);
    if (n > cap) n = cap;
    memcpy(out, all, sizeof(slot) * (size_t)n);
    return n;
}

/** Prints the capability bits of a backend. */
static void print_caps(uint32_t caps) {
    printf("    capabilities:");
    if (caps & EM_CAP_STRIDED_INPUTS) printf(" strided-inputs");
    if (caps & EM_CAP_HOST_MEMORY) printf(" host-memory");
    if (caps & EM_CAP_ASYNC) printf(" async");
    if (!(caps & (EM_CAP_STRIDED_INPUTS | EM_CAP_HOST_MEMORY | EM_CAP_ASYNC))) printf(" none");
    printf("\n");
}

/** True when backend o fills slot `name` with a forwarder to ref's kernel for every case (the
 *  cpu backend's whole-slot rows in src/backends/cpu/fallback.c): not native. */
static bool forwards_to_ref(const em_backend_ops *o, const char *name) {
#ifdef EMBER_WITH_CPU
    if (o->id != EM_BACKEND_CPU) return false;
    for (int c = 0; c < CPU_FB_COUNT; c++) {
        const cpu_fb_case *fc = cpu_fallback_case(c);
        if (fc && fc->whole_slot && strcmp(fc->slot, name) == 0) return true;
    }
#else
    (void)o;
    (void)name;
#endif
    return false;
}

/** Prints one backend: its devices, capabilities, and native kernels. */
static void print_backend(const em_backend_ops *o) {
    int count = o->device_count();
    printf("  %-10s id %-2d  ", o->name, (int)o->id);
    if (count == 0) printf("compiled in, no device\n");
    else printf("%d device%s\n", count, count == 1 ? "" : "s");
    print_caps(o->caps);
    printf("    sync: %s, memory stats: %s, caching allocator: %s\n",
           o->sync ? "yes" : "no (synchronous)", o->memory ? "yes" : "no",
           o->memory_cached ? "yes" : "no");
    slot s[64];
    int n = list_slots(o, s, 64), have = 0;
    for (int i = 0; i < n; i++)
        if (s[i].present && forwards_to_ref(o, s[i].name)) s[i].present = false;
    printf("    native:");
    for (int i = 0; i < n; i++) {
        if (!s[i].present) continue;
        have++;
        if (s[i].ops) printf(" %s(%d ops)", s[i].name, s[i].ops);
        else printf(" %s", s[i].name);
    }
    bool inherits = (o->caps & EM_CAP_HOST_MEMORY) && o->id != EM_BACKEND_REF;
    printf("%s\n    %s:", have ? "" : " (none)", inherits ? "from ref" : "missing");
    int missing = 0;
    for (int i = 0; i < n; i++)
        if (!s[i].present) {
            printf(" %s", s[i].name);
            missing++;
        }
    printf("%s\n", missing ? "" : " (none)");
    printf("    %d of %d kernel slots native%s\n", have, n,
           inherits && missing ? " (the others run ref's kernels on this backend's host memory)"
                               : "");
}

/** The cpu backend's lines: its ISA level, OpenBLAS's build and kernel (and a warning when
 *  that kernel is older than the CPU). */
static void print_cpu(void) {
#ifdef EMBER_WITH_CPU
    char line[320];
    cpu_isa_describe(line, sizeof line);
    printf("cpu: isa %s\n", line);
    const char *ql = getenv("EMBER_CPU_QUANT");
    printf("cpu: quantized products (int8) %s%s%s%s\n", cpu_quant_level_name(cpu_quant_level()),
           ql && *ql ? " (EMBER_CPU_QUANT=" : "", ql && *ql ? ql : "", ql && *ql ? ")" : "");
#ifdef EMBER_HAVE_OPENBLAS
    const char *core = openblas_get_corename(), *env = getenv("OPENBLAS_CORETYPE");
    int cpu_threads(void);
    int openblas_get_num_threads(void);
    const int pool = cpu_threads(); /* starts the pool, which sets OpenBLAS to one thread */
    printf("cpu: openblas %s; kernel %s", openblas_get_config(), core ? core : "?");
    if (env && *env) printf(" (OPENBLAS_CORETYPE=%s)", env);
    printf("; threads %d (ember splits a product over its own pool of %d)\n",
           openblas_get_num_threads(), pool);
    cpu_gemm_describe(line, sizeof line);
    printf("cpu: gemm %s\n", line);
    /* a kernel below the CPU's level only costs speed when OpenBLAS's GEMM runs */
    if (cpu_blas_core_unrunnable(core, cpu_isa_best(), line, sizeof line) ||
        (!cpu_gemm_is_ember() && cpu_blas_core_warning(core, cpu_isa_best(), line, sizeof line)))
        printf("cpu: warning: %s\n", line);
#endif
    printf("\n");
#endif
}

/** The cpu backend's cases that still run ref's loops, per slot (src/backends/cpu/fallback.c:
 *  EMBER_REPORT_FALLBACKS=1 counts them at run time). */
static void print_cpu_fallbacks(void) {
#ifdef EMBER_WITH_CPU
    printf("cpu: cases that run ref's kernels (EMBER_REPORT_FALLBACKS=1 counts them):\n");
    for (int c = 0; c < CPU_FB_COUNT; c++) {
        const cpu_fb_case *fc = cpu_fallback_case(c);
        if (!fc) continue;
        printf("  %-28s %s%s\n", fc->slot, fc->when,
               fc->expected ? " [expected]" : "");
    }
    printf("\n");
#endif
}

int main(int argc, char **argv) {
    if (argc > 1) {
        fprintf(stderr, "usage: %s\n  prints the version, backends, devices and native kernels\n",
                argv[0]);
        return strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ? 0 : 2;
    }
    printf("ember %s (backend ABI %u)\n\n", em_version(), EM_BACKEND_ABI_VERSION);

    /* every plugin found is loaded (em_devices does), so that its backend is listed below */
    size_t count = 0;
    if (em_devices(NULL, 0, &count) != EM_OK) {
        fprintf(stderr, "ember-info: em_devices: %s\n", em_last_error());
        return 1;
    }
    size_t nplug = 0;
    em_plugin_info plugs[32];
    if (em_plugins(plugs, 32, &nplug) != EM_OK) nplug = 0;
    printf("Plugins (%zu; searched in EMBER_PLUGIN_PATH, <lib>/ember, the install dir):\n", nplug);
    for (size_t i = 0; i < nplug && i < 32; i++) {
        const em_plugin_info *p = &plugs[i];
        printf("  %-10s %s\n", p->name[0] ? p->name : "?", p->path);
        if (!p->loaded) printf("    not loaded\n");
        else if (p->status == EM_OK) printf("    loaded\n");
        else printf("    FAILED (%s): %s\n", em_status_name(p->status), p->message);
    }
    printf("\n");

    printf("Backends (built in, or from plugins):\n");
    int compiled = 0;
    for (int b = 0; b < EM_BACKEND_MAX; b++) {
        const em_backend_ops *o = em_backend_get_native((em_backend)b);
        if (!o) continue;
        compiled++;
        print_backend(o);
    }
    printf("Not in this build:");
    for (int b = 0; b <= EM_BACKEND_CAPTURE; b++)
        if (!em_backend_get((em_backend)b)) printf(" %s", em_backend_name((em_backend)b));
    printf("\n\n");
    print_cpu();
    print_cpu_fallbacks();

    em_device *list = calloc(count ? count : 1, sizeof *list);
    if (!list || em_devices(list, count, &count) != EM_OK) {
        fprintf(stderr, "ember-info: em_devices: %s\n", em_last_error());
        free(list);
        return 1;
    }
    printf("Devices present (%zu):\n", count);
    for (size_t i = 0; i < count; i++) {
        char name[64];
        if (em_device_name(list[i], name, sizeof name) != EM_OK) snprintf(name, sizeof name, "?");
        printf("  %s\n", name);
    }
    free(list);

    char def[64];
    em_device d = em_device_default();
    if (em_device_name(d, def, sizeof def) != EM_OK) snprintf(def, sizeof def, "?");
    const char *env = getenv("EMBER_DEVICE");
    printf("\nDefault device: %s", def);
    if (env && *env) printf("  (EMBER_DEVICE=%s)", env);
    printf("\n");
    return compiled > 0 ? 0 : 1;
}
