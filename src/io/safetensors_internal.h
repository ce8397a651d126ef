/*
 * safetensors_internal.h — the safetensors reader and writer of safetensors.c on raw bytes, for
 * the formats built on safetensors (src/graph/file.c: a captured graph's file). Not installed.
 *
 * The reader makes every check em_safetensors_load makes (header length, UTF-8, JSON, each
 * entry's dtype, shape and offsets, __metadata__ an object of strings, no duplicate names, no
 * overlap, nothing past the data) but no tensors: it hands out each tensor's bytes where they
 * lie, and the metadata's strings. The writer writes given bytes and metadata as
 * em_safetensors_save writes tensors. Messages start "<fn>: <path or what>: ".
 */
#ifndef EMBER_IO_SAFETENSORS_INTERNAL_H
#define EMBER_IO_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ember/ember.h"

/** One tensor of a file: its header entry and its bytes (little-endian, as in the file). */
typedef struct emi_st_tensor {
    const char *name;
    em_dtype dtype; /* one that safetensors has: not quantized */
    int rank;
    int64_t shape[EM_MAX_RANK];
    const uint8_t *data; /* reading: into the file's bytes, valid until emi_st_close */
    uint64_t bytes;      /* numel x dtype size */
} emi_st_tensor;

/** A parsed file (owned by its opener, closed with emi_st_close). */
typedef struct emi_st_file emi_st_file;

/** Parses the file at path (mapped, or read whole when it cannot be). Errors: EM_ERR_IO (cannot
 *  open or read it; anything malformed, with the reason), EM_ERR_NOMEM. */
em_status emi_st_open_file(const char *fn, const char *path, emi_st_file **out);
/** Parses len bytes at data, which must outlive the file (it points into them); `what` names
 *  them in messages. Errors as emi_st_open_file. */
em_status emi_st_open_buffer(const char *fn, const char *what, const void *data, size_t len,
                             emi_st_file **out);
/** The number of tensors; tensor i in header order (NULL past the end); the tensor named
 *  name (NULL when none); the metadata value of key (NULL when none). All stay valid until
 *  emi_st_close. */
size_t emi_st_count(const emi_st_file *f);
const emi_st_tensor *emi_st_at(const emi_st_file *f, size_t i);
const emi_st_tensor *emi_st_find(const emi_st_file *f, const char *name);
const char *emi_st_meta(const emi_st_file *f, const char *key);
/** Releases f (and its mapping). NULL is a no-op. */
void emi_st_close(emi_st_file *f);

/** Writes n tensors (their data and bytes as given, little-endian) and nmeta metadata pairs
 *  (meta[2k] the key, meta[2k + 1] the value; none when nmeta is 0) to "<path>.tmp", renamed
 *  over path when complete. The caller guarantees unique names that are valid UTF-8 and not
 *  "__metadata__". Errors: EM_ERR_DTYPE (a dtype safetensors lacks), EM_ERR_IO (cannot write;
 *  a header larger than readers accept), EM_ERR_NOMEM. */
em_status emi_st_save(const char *fn, const char *path, const emi_st_tensor *t, size_t n,
                      const char *const *meta, size_t nmeta);

#endif /* EMBER_IO_SAFETENSORS_INTERNAL_H */
