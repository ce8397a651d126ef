/* ocl_sources.h — the embedded .cl files (a C file CMake generates from this folder's .cl
 * files with cmake/ember_embed_cl.cmake). */
#ifndef EMBER_OCL_SOURCES_H
#define EMBER_OCL_SOURCES_H

/** One embedded kernel source: the .cl file's base name and its text. */
typedef struct ocl_source_entry {
    const char *name;
    const char *text;
} ocl_source_entry;

/** Every .cl file of src/backends/opencl, ended by {NULL, NULL}. */
extern const ocl_source_entry ocl_sources[];

#endif /* EMBER_OCL_SOURCES_H */
