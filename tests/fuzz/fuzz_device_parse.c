/*
 * fuzz_device_parse.c — libFuzzer target for the text parsers: em_device_parse and
 * em_dtype_parse get arbitrary NUL-terminated text. Neither may crash; a failure must leave a
 * message; a device that parses must round-trip through em_device_name (with every buffer
 * size, too small ones refused without writing past them); a dtype that parses must be named
 * by exactly that text.
 *
 * Build: cmake -DEMBER_BUILD_FUZZ=ON -DCMAKE_C_COMPILER=clang; run:
 *   fuzz_device_parse -max_total_time=30 NEW_CORPUS_DIR tests/fuzz/corpus/device_parse
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"

/** Stops the run with a message: libFuzzer saves the input that got here. */
static void die(const char *what, const char *text) {
    fprintf(stderr, "fuzz_device_parse: %s (input \"%s\", last error \"%s\")\n", what, text,
            em_last_error());
    abort();
}

/** Checks em_device_name(d) with every buffer size from 0 to one past what it needs. */
static void check_name_sizes(em_device d, const char *name, const char *text) {
    size_t need = strlen(name) + 1;
    for (size_t cap = 0; cap <= need; cap++) {
        char *buf = malloc(cap ? cap : 1); /* exact size: ASan sees any write past it */
        if (!buf) return;
        em_status s = em_device_name(d, buf, cap);
        if (cap < need && s != EM_ERR_ARG) die("em_device_name accepted a too small buffer", text);
        if (cap >= need && (s != EM_OK || strcmp(buf, name) != 0))
            die("em_device_name differs with an exact buffer", text);
        free(buf);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    em_device d;
    em_status s = em_device_parse(text, &d);
    if (s == EM_OK) {
        char name[128];
        em_device back;
        if (em_device_name(d, name, sizeof name) != EM_OK) die("em_device_name failed", text);
        if (em_device_parse(name, &back) != EM_OK) die("the name does not parse", text);
        if (!em_device_equal(d, back)) die("parse(name(parse(text))) differs", text);
        check_name_sizes(d, name, text);
    } else {
        if (s != EM_ERR_ARG && s != EM_ERR_DEVICE) die("unexpected status from em_device_parse", text);
        if (em_last_error()[0] == '\0') die("em_device_parse failed without a message", text);
    }

    em_dtype dt;
    s = em_dtype_parse(text, &dt);
    if (s == EM_OK) {
        if (strcmp(em_dtype_name(dt), text) != 0) die("em_dtype_name(parse(text)) != text", text);
        if (em_dtype_size(dt) == 0) die("a parsed dtype has size 0", text);
    } else if (s != EM_ERR_ARG || em_last_error()[0] == '\0') {
        die("em_dtype_parse failed without EM_ERR_ARG and a message", text);
    }
    free(text);
    return 0;
}
