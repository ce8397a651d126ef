/*
 * io.h — file formats: the IDX format of (Fashion-)MNIST, and safetensors.
 *
 * Read it top to bottom:
 *   1. datasets: IDX image and label files (optionally gzip-compressed), shuffled batches
 *   2. safetensors: save named tensors, load them onto any device
 *
 * The rules of ember.h hold here too: every fallible call returns an em_status and writes its
 * out-parameters only on success; em_last_error() says what went wrong. A file that is
 * truncated, corrupt or inconsistent is EM_ERR_IO with the reason, e.g.
 *   em_idx_load: images.idx: truncated: 47040016 bytes expected, 1000 found
 * never a crash.
 */
#ifndef EMBER_IO_H
#define EMBER_IO_H

#include <stddef.h>
#include <stdint.h>

#include "ember/ember.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================
 * 1. Datasets: IDX files
 * ====================================================================================== */

/** An opaque in-memory dataset: N images of rows x cols unsigned bytes and N labels. Read-only
 *  after loading, so it may be shared between threads. */
typedef struct em_dataset em_dataset;

/** Loads an IDX image file (magic 0x00000803: u8 [N, rows, cols]) and an IDX label file
 *  (magic 0x00000801: u8 [N]), each plain or gzip-compressed (detected from its content), as in
 *  the (Fashion-)MNIST distribution. *out gets a new dataset, released with
 *  em_dataset_release. Errors: EM_ERR_ARG (a NULL argument), EM_ERR_IO (a file that cannot be
 *  opened, is not IDX, has the wrong magic or element type, has zero rows or columns, is
 *  truncated or longer than its header says, corrupt gzip data, image and label counts that
 *  differ: the message names the file and the reason), EM_ERR_NOMEM. */
em_status em_idx_load(const char *images_path, const char *labels_path, em_dataset **out);

/** The number of samples N; 0 when ds is NULL. */
int64_t em_dataset_size(const em_dataset *ds);

/** Writes the image size into *rows and *cols (either may be NULL). EM_ERR_ARG if ds is
 *  NULL. */
em_status em_dataset_shape(const em_dataset *ds, int64_t *rows, int64_t *cols);

/** The number of classes: the largest label plus one (0 for an empty dataset or NULL). */
int64_t em_dataset_num_classes(const em_dataset *ds);

/** Gathers the samples indices[0..n-1] into two new tensors on dev: *images, f32
 *  [n, 1, rows, cols] with the bytes scaled to [0, 1] (x / 255), and *labels, i64 [n]. Both are
 *  new references the caller releases; on failure neither is written. Errors: EM_ERR_ARG (NULL
 *  argument, n == 0, an index outside [0, N)), EM_ERR_DEVICE, EM_ERR_NOMEM. */
em_status em_dataset_batch(const em_dataset *ds, const int64_t *indices, size_t n,
                           em_device dev, em_tensor **images, em_tensor **labels);

/** Writes a permutation of 0..n-1 into perm[0..n-1], drawn from `seed` alone (Fisher-Yates
 *  over a SplitMix64 stream with unbiased bounded draws): the same seed gives the same order on
 *  every machine. EM_ERR_ARG if n < 0 or perm is NULL while n > 0. */
em_status em_dataset_shuffle(int64_t n, uint64_t seed, int64_t *perm);

/** Frees a dataset. NULL is a no-op. */
void em_dataset_release(em_dataset *ds);

/* ======================================================================================
 * 2. safetensors
 * ====================================================================================== */

/** Named tensors, as loaded from a safetensors file, in the order of the file's header. */
typedef struct em_tensor_map em_tensor_map;

/** Writes n named tensors to `path` in the safetensors format: an 8-byte little-endian header
 *  length, a JSON header {"name": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}}
 *  padded with spaces to a multiple of 8 bytes, then the raw little-endian data in the order
 *  given. Tensors may live on any device (they are read back with em_tensor_to_data); they are
 *  borrowed. The file is written to "<path>.tmp" and renamed over `path` when complete.
 *  Supported dtypes: f32 f64 f16 bf16 i64 i32 i16 i8 u8 bool, and quantized tensors (q8, q4,
 *  any em_quant_kind), which safetensors has no dtype for: such a tensor is written as its
 *  bytes in its scheme's contiguous layout (ember.h, em_quant_kind; em_tensor_to_data's bytes)
 *  with dtype "U8" and shape [number of bytes], and the file's "__metadata__" gets, under the
 *  key "ember.quant.<name>", a JSON object as a string (the format's metadata values are
 *  strings) giving its scheme and shape:
 *    block kinds:  {"scheme":"q4_block_min","scale_dtype":"f16","shape":[256,784]}
 *    per-tensor:   {"scheme":"q8_affine","scale":0.0123,"zero_point":-3,"shape":[4,8]}
 *  scheme one of "q8_affine", "q4_affine", "q8_symmetric" (no "zero_point"), "q8_block",
 *  "q4_block", "q4_block_min"; scale_dtype "f32" or "f16"; the scale the f32 value written
 *  exactly; "transposed": true for a 2-d block tensor whose blocks run along its first dim
 *  (em_params_quantize's form of a weight whose `in` is not a multiple of 32): its bytes are
 *  then those of its transpose, and loading makes the transpose view again
 *  (docs/quantization.md). Other readers see a "U8" tensor and the metadata string.
 *  Errors: EM_ERR_ARG (NULL path, NULL names or tensors with n > 0, a NULL or empty name, a
 *  name that is not valid UTF-8 (the header is JSON; the message says what is wrong and at
 *  which byte), the reserved name "__metadata__", a duplicate name, a NULL tensor),
 *  EM_ERR_UNSUPPORTED (a view of a block-quantized tensor whose blocks run along neither its
 *  last dim nor, 2-d, its first: save the tensor it views), EM_ERR_IO (the file cannot be
 *  written), EM_ERR_NOMEM, and whatever em_tensor_to_data reports. */
em_status em_safetensors_save(const char *path, const char *const *names,
                              const em_tensor *const *tensors, size_t n);

/** Reads the safetensors file at `path` and creates its tensors on dev. *out gets a new map,
 *  released with em_tensor_map_release. A regular file is mapped (read-only, private) rather
 *  than copied into memory, and the pages of each tensor are given back once it is made, so a
 *  load needs about the size of the tensors, not twice the file; the file must not be truncated
 *  while it loads. What cannot be mapped (a pipe) is read whole instead. Errors:
 *  EM_ERR_ARG (NULL argument), EM_ERR_IO (the file cannot be opened or read, is a directory, or
 *  is invalid: see em_safetensors_load_buffer; the message names the file), EM_ERR_DEVICE,
 *  EM_ERR_NOMEM. */
em_status em_safetensors_load(const char *path, em_device dev, em_tensor_map **out);

/** Parses a safetensors image of `len` bytes at `data` (borrowed; copied) and creates its
 *  tensors on dev. Everything is validated and each failure is EM_ERR_IO with the reason: a
 *  buffer shorter than 8 bytes, a header length beyond the buffer (or above 100 MB), a header
 *  that is not valid UTF-8 (an overlong form, a surrogate U+D800..U+DFFF, a code point above
 *  U+10FFFF, a truncated sequence, a stray continuation byte, a byte 0xF8..0xFF: the message
 *  gives the bytes, their offset in the header and the tensor name or __metadata__ key or value
 *  that holds them), a string escaping a lone surrogate ("\uD800") or "\u0000", a header
 *  that is not a JSON object, an entry without a string "dtype", an integer array "shape" or a
 *  two-integer "data_offsets", an unknown or unsupported dtype, rank > 8, a negative or
 *  non-integer dimension, an element count that overflows, offsets out of range, reversed,
 *  not matching shape x dtype size or overlapping another tensor's, duplicate names, a
 *  "__metadata__" that is not an object of strings. Bool bytes other than 0 are read as 1.
 *  A quantized tensor (em_safetensors_save's "ember.quant.<name>" metadata) is made with its
 *  scheme (em_tensor_from_quantized), after checks that are each EM_ERR_IO with the reason: the
 *  value not a JSON object, an unknown scheme, keys missing or extra for the scheme,
 *  "transposed" not a boolean of a block scheme or with a shape that is not 2-d, a
 *  scale_dtype other than "f32" / "f16", a per-tensor scale not finite and > 0 as an f32, a
 *  zero point that is not an integer in the storage's range, a shape that is not at most 8
 *  non-negative integers or that the scheme cannot hold (a block kind's last dim not a
 *  multiple of 32), the entry not "U8" of rank 1, its byte count not the layout's size for the
 *  shape, a key naming no tensor or one tensor twice, a per-tensor value outside its storage's
 *  range (q8 symmetric [-127, 127], q4 [-8, 7]). Block scales are taken as given (NaN too).
 *  A file without such keys loads as before. Other errors: EM_ERR_ARG (NULL out, NULL data
 *  with len > 0), EM_ERR_DEVICE, EM_ERR_NOMEM. */
em_status em_safetensors_load_buffer(const void *data, size_t len, em_device dev,
                                     em_tensor_map **out);

/** The number of tensors in m; 0 when m is NULL. */
size_t em_tensor_map_size(const em_tensor_map *m);

/** The name of the i-th tensor (header order), owned by m; NULL if m is NULL or i is out of
 *  range. */
const char *em_tensor_map_name(const em_tensor_map *m, size_t i);

/** Writes a new reference to the tensor called `name` into *out (release it with
 *  em_tensor_release). A binary search: O(log n) in the number of tensors. EM_ERR_ARG for a
 *  NULL argument or a name that is not in the map. */
em_status em_tensor_map_get(const em_tensor_map *m, const char *name, em_tensor **out);

/** Frees the map and releases its references to the tensors (tensors obtained with
 *  em_tensor_map_get stay valid). NULL is a no-op. */
void em_tensor_map_release(em_tensor_map *m);

#ifdef __cplusplus
}
#endif
#endif /* EMBER_IO_H */
