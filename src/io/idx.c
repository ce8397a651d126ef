/*
 * idx.c — the IDX format of (Fashion-)MNIST: image and label files, plain or gzip-compressed,
 * loaded into an em_dataset; batches gathered into tensors; seeded permutations.
 *
 * Built on the public API only (ember.h, io.h) plus em_backend_set_error for messages.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "ember/backend.h"
#include "ember/ember.h"
#include "ember/io.h"

struct em_dataset {
    int64_t n, rows, cols;
    uint8_t *images; /* n * rows * cols */
    uint8_t *labels; /* n */
    int64_t classes;
};

/* Largest file body accepted (decompressed): 16 GiB; guards against absurd headers. */
#define IDX_MAX_BYTES ((uint64_t)1 << 34)

/* Reads up to `want` bytes (uint64) from f into dst; returns how many were read, and sets
 * *zerr to a zlib error message when the stream is corrupt (NULL otherwise). */
static uint64_t gz_read_all(gzFile f, uint8_t *dst, uint64_t want, const char **zerr) {
    uint64_t got = 0;
    *zerr = NULL;
    while (got < want) {
        uint64_t left = want - got;
        unsigned chunk = left > (1u << 30) ? (1u << 30) : (unsigned)left;
        int r = gzread(f, dst + got, chunk);
        if (r < 0) {
            int errnum = 0;
            *zerr = gzerror(f, &errnum);
            if (*zerr == NULL || (*zerr)[0] == '\0') *zerr = "read error";
            break;
        }
        if (r == 0) {
            int errnum = 0;
            const char *m = gzerror(f, &errnum);
            if (errnum != Z_OK && errnum != Z_BUF_ERROR && m != NULL) *zerr = m;
            break;
        }
        got += (uint64_t)r;
    }
    return got;
}

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Reads one IDX file with `want_dims` dimensions of unsigned bytes. On success *data gets a
 * malloc'd body and dims[0..want_dims-1] its dimensions. */
static em_status idx_read(const char *path, int want_dims, int64_t *dims, uint8_t **data) {
    static const char *fn = "em_idx_load";
    gzFile f = gzopen(path, "rb");
    if (f == NULL) return em_backend_set_error(EM_ERR_IO, "%s: %s: cannot open", fn, path);
    em_status s = EM_OK;
    uint8_t *body = NULL;
    const char *zerr = NULL;
    uint8_t head[4 + 4 * 3];
    uint64_t hlen = 4 + 4 * (uint64_t)want_dims;
    uint64_t got = gz_read_all(f, head, 4, &zerr);
    if (zerr != NULL) {
        s = em_backend_set_error(EM_ERR_IO, "%s: %s: corrupt gzip data: %s", fn, path, zerr);
        goto done;
    }
    if (got < 4) {
        s = em_backend_set_error(EM_ERR_IO, "%s: %s: truncated: %llu bytes, not an IDX file",
                                 fn, path, (unsigned long long)got);
        goto done;
    }
    if (head[0] != 0 || head[1] != 0) {
        s = em_backend_set_error(EM_ERR_IO,
                                 "%s: %s: not an IDX file (magic 0x%02x%02x%02x%02x)", fn,
                                 path, head[0], head[1], head[2], head[3]);
        goto done;
    }
    if (head[2] != 0x08) {
        s = em_backend_set_error(EM_ERR_IO,
                                 "%s: %s: element type 0x%02x is not supported (only unsigned "
                                 "bytes, 0x08)",
                                 fn, path, head[2]);
        goto done;
    }
    if (head[3] != want_dims) {
        s = em_backend_set_error(EM_ERR_IO, "%s: %s: %d dimensions, expected %d (magic 0x%08x)",
                                 fn, path, head[3], want_dims, 0x800u | (unsigned)want_dims);
        goto done;
    }
    got += gz_read_all(f, head + 4, hlen - 4, &zerr);
    if (zerr != NULL) {
        s = em_backend_set_error(EM_ERR_IO, "%s: %s: corrupt gzip data: %s", fn, path, zerr);
        goto done;
    }
    if (got < hlen) {
        s = em_backend_set_error(EM_ERR_IO,
                                 "%s: %s: truncated: %llu header bytes expected, %llu found", fn,
                                 path, (unsigned long long)hlen, (unsigned long long)got);
        goto done;
    }
    uint64_t body_bytes = 1;
    for (int i = 0; i < want_dims; i++) {
        dims[i] = be32(head + 4 + 4 * i);
        if (i > 0 && dims[i] == 0) {
            s = em_backend_set_error(EM_ERR_IO, "%s: %s: dimension %d is 0", fn, path, i);
            goto done;
        }
        body_bytes *= (uint64_t)dims[i]; /* each factor < 2^32; checked below */
        if (body_bytes > IDX_MAX_BYTES) {
            s = em_backend_set_error(EM_ERR_IO, "%s: %s: header declares more than %llu bytes",
                                     fn, path, (unsigned long long)IDX_MAX_BYTES);
            goto done;
        }
    }
    uint64_t total = hlen + body_bytes;
    body = malloc(body_bytes ? (size_t)body_bytes : 1);
    if (body == NULL) {
        s = em_backend_set_error(EM_ERR_NOMEM, "%s: %s: out of memory for %llu bytes", fn, path,
                                 (unsigned long long)body_bytes);
        goto done;
    }
    got = hlen + gz_read_all(f, body, body_bytes, &zerr);
    if (zerr != NULL) {
        s = em_backend_set_error(EM_ERR_IO, "%s: %s: corrupt gzip data: %s", fn, path, zerr);
        goto done;
    }
    if (got < total) {
        s = em_backend_set_error(EM_ERR_IO, "%s: %s: truncated: %llu bytes expected, %llu found",
                                 fn, path, (unsigned long long)total, (unsigned long long)got);
        goto done;
    }
    /* Anything after the declared body is an error too: the header and the file disagree. */
    uint8_t extra[4096];
    uint64_t more = 0, r;
    while ((r = gz_read_all(f, extra, sizeof extra, &zerr)) > 0) {
        more += r;
        if (zerr != NULL || r < sizeof extra) break;
    }
    if (zerr != NULL) {
        s = em_backend_set_error(EM_ERR_IO, "%s: %s: corrupt gzip data: %s", fn, path, zerr);
        goto done;
    }
    if (more > 0) {
        s = em_backend_set_error(EM_ERR_IO,
                                 "%s: %s: %llu bytes expected, found %llu more after them", fn,
                                 path, (unsigned long long)total, (unsigned long long)more);
        goto done;
    }
    *data = body;
    body = NULL;
done:
    free(body);
    gzclose(f);
    return s;
}

em_status em_idx_load(const char *images_path, const char *labels_path, em_dataset **out) {
    if (images_path == NULL || labels_path == NULL || out == NULL)
        return em_backend_set_error(EM_ERR_ARG, "em_idx_load: %s is NULL",
                                    images_path == NULL ? "images_path"
                                    : labels_path == NULL ? "labels_path"
                                                          : "out");
    int64_t idims[3] = {0, 0, 0}, ldims[1] = {0};
    uint8_t *images = NULL, *labels = NULL;
    em_status s = idx_read(images_path, 3, idims, &images);
    if (s != EM_OK) return s;
    s = idx_read(labels_path, 1, ldims, &labels);
    if (s != EM_OK) {
        free(images);
        return s;
    }
    if (idims[0] != ldims[0]) {
        free(images), free(labels);
        return em_backend_set_error(EM_ERR_IO, "em_idx_load: %s has %lld images but %s has %lld "
                                    "labels", images_path, (long long)idims[0], labels_path,
                                    (long long)ldims[0]);
    }
    em_dataset *ds = calloc(1, sizeof *ds);
    if (ds == NULL) {
        free(images), free(labels);
        return em_backend_set_error(EM_ERR_NOMEM, "em_idx_load: out of memory");
    }
    ds->n = idims[0];
    ds->rows = idims[1];
    ds->cols = idims[2];
    ds->images = images;
    ds->labels = labels;
    int64_t maxl = -1;
    for (int64_t i = 0; i < ds->n; i++)
        if (labels[i] > maxl) maxl = labels[i];
    ds->classes = maxl + 1;
    *out = ds;
    return EM_OK;
}

int64_t em_dataset_size(const em_dataset *ds) { return ds ? ds->n : 0; }

em_status em_dataset_shape(const em_dataset *ds, int64_t *rows, int64_t *cols) {
    if (ds == NULL) return em_backend_set_error(EM_ERR_ARG, "em_dataset_shape: ds is NULL");
    if (rows) *rows = ds->rows;
    if (cols) *cols = ds->cols;
    return EM_OK;
}

int64_t em_dataset_num_classes(const em_dataset *ds) { return ds ? ds->classes : 0; }

em_status em_dataset_batch(const em_dataset *ds, const int64_t *indices, size_t n,
                           em_device dev, em_tensor **images, em_tensor **labels) {
    static const char *fn = "em_dataset_batch";
    if (ds == NULL || indices == NULL || images == NULL || labels == NULL)
        return em_backend_set_error(EM_ERR_ARG, "%s: %s is NULL", fn,
                                    ds == NULL        ? "ds"
                                    : indices == NULL ? "indices"
                                    : images == NULL  ? "images"
                                                      : "labels");
    if (n == 0) return em_backend_set_error(EM_ERR_ARG, "%s: n is 0", fn);
    if (n > (size_t)INT64_MAX / 4)
        return em_backend_set_error(EM_ERR_ARG, "%s: n = %zu is too large", fn, n);
    for (size_t i = 0; i < n; i++)
        if (indices[i] < 0 || indices[i] >= ds->n)
            return em_backend_set_error(EM_ERR_ARG,
                                        "%s: indices[%zu] = %lld is outside [0, %lld)", fn, i,
                                        (long long)indices[i], (long long)ds->n);
    size_t per = (size_t)(ds->rows * ds->cols);
    if (per != 0 && n > SIZE_MAX / sizeof(float) / per)
        return em_backend_set_error(EM_ERR_NOMEM, "%s: batch too large", fn);
    float *x = malloc(n * per * sizeof(float));
    int64_t *y = malloc(n * sizeof(int64_t));
    if (x == NULL || y == NULL) {
        free(x), free(y);
        return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory for %zu samples", fn, n);
    }
    for (size_t i = 0; i < n; i++) {
        const uint8_t *src = ds->images + (size_t)indices[i] * per;
        float *dst = x + i * per;
        for (size_t j = 0; j < per; j++) dst[j] = (float)src[j] * (1.0f / 255.0f);
        y[i] = ds->labels[indices[i]];
    }
    int64_t xshape[4] = {(int64_t)n, 1, ds->rows, ds->cols}, yshape[1] = {(int64_t)n};
    em_tensor *xt = NULL, *yt = NULL;
    em_status s = em_tensor_from_data(x, EM_F32, xshape, 4, dev, &xt);
    if (s == EM_OK) s = em_tensor_from_data(y, EM_I64, yshape, 1, dev, &yt);
    free(x), free(y);
    if (s != EM_OK) {
        em_tensor_release(xt);
        return s;
    }
    *images = xt;
    *labels = yt;
    return EM_OK;
}

/* SplitMix64: a tiny generator whose output depends on the seed alone. */
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A uniform draw in [0, bound) without modulo bias (rejection sampling). */
static uint64_t bounded(uint64_t *state, uint64_t bound) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound; /* multiples of bound below it */
    uint64_t r;
    do r = splitmix64(state);
    while (r >= limit);
    return r % bound;
}

em_status em_dataset_shuffle(int64_t n, uint64_t seed, int64_t *perm) {
    if (n < 0) return em_backend_set_error(EM_ERR_ARG, "em_dataset_shuffle: n = %lld < 0",
                                           (long long)n);
    if (n > 0 && perm == NULL)
        return em_backend_set_error(EM_ERR_ARG, "em_dataset_shuffle: perm is NULL");
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    uint64_t state = seed;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)bounded(&state, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    return EM_OK;
}

void em_dataset_release(em_dataset *ds) {
    if (ds == NULL) return;
    free(ds->images);
    free(ds->labels);
    free(ds);
}
