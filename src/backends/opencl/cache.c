/*
 * cache.c — the OpenCL backend's disk cache of program binaries.
 *
 * Folder: $EMBER_CACHE_DIR, else $XDG_CACHE_HOME/ember/opencl, else ~/.cache/ember/opencl
 * (created when missing; no folder usable: no cache). One file per program, named by a
 * 128-bit hash of (program text, build options, device name, driver version, platform
 * version). A file is: magic "EMBOCL1\n", the payload's length (u64), its FNV-1a hash (u64),
 * the payload. A file whose size, magic or hash does not match is ignored (and rewritten by
 * the next build). Writes go to a temporary file renamed into place, so readers never see a
 * partial file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ocl_internal.h"

#define OCL_MAGIC "EMBOCL1\n"

/* FNV-1a over n bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Hashes a string and its terminating NUL (so that fields cannot run into each other). */
static uint64_t fnv_str(uint64_t h, const char *s) { return fnv(h, s, strlen(s) + 1); }

void ocl_cache_key(const ocl_dev *d, const char *text, const char *options, char key[33]) {
    uint64_t h[2] = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
    for (int k = 0; k < 2; k++) {
        h[k] = fnv_str(h[k], k ? "ember-opencl-b" : "ember-opencl-a");
        h[k] = fnv_str(h[k], text);
        h[k] = fnv_str(h[k], options);
        h[k] = fnv_str(h[k], d->name);
        h[k] = fnv_str(h[k], d->driver);
        h[k] = fnv_str(h[k], d->platform_version);
    }
    snprintf(key, 33, "%016llx%016llx", (unsigned long long)h[0], (unsigned long long)h[1]);
}

/* mkdir -p path (its last component included); 0 when it exists afterwards. */
static int mkdirs(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        int r = mkdir(path, 0755);
        *p = '/';
        if (r != 0 && errno != EEXIST) return -1;
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* The cache folder (created), or 0 when there is none; written into dir. */
static int cache_dir(char *dir, size_t cap) {
    const char *e = getenv("EMBER_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int n;
    if (e && *e) n = snprintf(dir, cap, "%s", e);
    else if (x && *x) n = snprintf(dir, cap, "%s/ember/opencl", x);
    else if (h && *h) n = snprintf(dir, cap, "%s/.cache/ember/opencl", h);
    else return 0;
    if (n <= 0 || (size_t)n >= cap) return 0;
    return mkdirs(dir) == 0;
}

unsigned char *ocl_cache_load(const char *key, size_t *len) {
    char dir[3072], path[3200];
    if (!cache_dir(dir, sizeof dir)) return NULL;
    snprintf(path, sizeof path, "%s/%s.bin", dir, key);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char hdr[24];
    unsigned char *bin = NULL;
    uint64_t n = 0, sum = 0;
    if (fread(hdr, 1, sizeof hdr, f) != sizeof hdr || memcmp(hdr, OCL_MAGIC, 8) != 0) goto bad;
    memcpy(&n, hdr + 8, 8);
    memcpy(&sum, hdr + 16, 8);
    if (n == 0 || n > ((uint64_t)1 << 31)) goto bad;
    bin = malloc((size_t)n);
    if (!bin || fread(bin, 1, (size_t)n, f) != (size_t)n || fgetc(f) != EOF) goto bad;
    if (fnv(0xcbf29ce484222325ull, bin, (size_t)n) != sum) goto bad;
    fclose(f);
    *len = (size_t)n;
    return bin;
bad:
    free(bin);
    fclose(f);
    return NULL;
}

void ocl_cache_store(const char *key, const unsigned char *bin, size_t len) {
    static atomic_uint seq;
    char dir[3072], path[3200], tmp[3300];
    if (!cache_dir(dir, sizeof dir)) return;
    snprintf(path, sizeof path, "%s/%s.bin", dir, key);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&seq, 1));
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    uint64_t n = len, sum = fnv(0xcbf29ce484222325ull, bin, len);
    int ok = fwrite(OCL_MAGIC, 1, 8, f) == 8 && fwrite(&n, 8, 1, f) == 1 &&
             fwrite(&sum, 8, 1, f) == 1 && fwrite(bin, 1, len, f) == len;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) remove(tmp);
}
