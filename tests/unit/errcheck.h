/*
 * errcheck.h — helpers shared by the bad-input tests (test_errors_*.c).
 *
 * EXPECT_ERR(status, "em_fn", call) runs one call that must fail and checks:
 *   - the returned status is `status`,
 *   - em_last_error() is non-empty and names the function ("em_fn"),
 *   - the out-parameters `o` and `o2` (declared by the macro, pre-set to a sentinel pointer;
 *     the call passes &o / &o2) were left untouched.
 * A mismatch is printed and counted rather than aborting the test, so that one run lists every
 * failing case; CHECKS_DONE() at the end of a test fails it if any case failed.
 *
 * Also here: fixtures (small tensors of each kind on ref) and "fake", an out-of-tree backend
 * registered with em_backend_register that delegates to the ref backend's table, so that two
 * devices exist even in a ref-only build.
 */
#ifndef EMBER_TEST_ERRCHECK_H
#define EMBER_TEST_ERRCHECK_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember/backend.h"
#include "ember/ember.h"

/** A pointer no ember call may write: *out must still hold it after a failed call. */
#define SENTINEL ((em_tensor *)(uintptr_t)0x5e5e5e50u)

static int chk_failures;

/** Records one failed expectation (printed now, counted for CHECKS_DONE). */
static inline void chk_report(const char *file, int line, const char *call, const char *what) {
    print_error("%s:%d: %s\n    %s\n", file, line, call, what);
    chk_failures++;
}

/** Checks the result of a call that must fail with `want`, naming `fn` in its message. */
static inline void chk_err(em_status got, em_status want, const char *fn, bool untouched,
                           const char *call, const char *file, int line) {
    char what[1024];
    const char *msg = em_last_error();
    if (msg == NULL) msg = "(NULL)";
    if (got != want) {
        snprintf(what, sizeof what, "expected %s, got %s (message \"%s\")",
                 em_status_name(want), em_status_name(got), msg);
        chk_report(file, line, call, what);
        return;
    }
    if (msg[0] == '\0') {
        chk_report(file, line, call, "em_last_error() is empty after a failed call");
    } else if (fn != NULL && strstr(msg, fn) == NULL) {
        snprintf(what, sizeof what, "message \"%s\" does not name %s", msg, fn);
        chk_report(file, line, call, what);
    }
    if (!untouched) chk_report(file, line, call, "an out-parameter was written on failure");
}

/** Checks an arbitrary condition, counting a failure with `what` when it is false. */
#define CHECK(cond, what)                                                                    \
    do {                                                                                     \
        if (!(cond)) chk_report(__FILE__, __LINE__, #cond, (what));                          \
    } while (0)

/** Runs `call`, which may use &o and &o2 as out-parameters, and checks that it fails. On an
 *  unexpected success, the outputs are released. */
#define EXPECT_ERR(want, fn, call)                                                           \
    do {                                                                                     \
        em_tensor *o = SENTINEL, *o2 = SENTINEL;                                             \
        em_clear_error();                                                                    \
        em_status s_ = (call);                                                               \
        chk_err(s_, (want), (fn), o == SENTINEL && o2 == SENTINEL, #call, __FILE__,          \
                __LINE__);                                                                   \
        if (s_ == EM_OK) {                                                                   \
            if (o != SENTINEL) em_tensor_release(o);                                         \
            if (o2 != SENTINEL) em_tensor_release(o2);                                       \
        }                                                                                    \
    } while (0)

/** Like EXPECT_ERR, and the message must also contain `text`. */
#define EXPECT_ERR_MSG(want, fn, text, call)                                                 \
    do {                                                                                     \
        EXPECT_ERR(want, fn, call);                                                          \
        if (strstr(em_last_error(), (text)) == NULL) {                                       \
            char w_[1024];                                                                   \
            snprintf(w_, sizeof w_, "message \"%s\" lacks \"%s\"", em_last_error(), (text)); \
            chk_report(__FILE__, __LINE__, #call, w_);                                       \
        }                                                                                    \
    } while (0)

/** Fails the current cmocka test if any expectation failed since the last CHECKS_DONE. */
#define CHECKS_DONE()                                                                        \
    do {                                                                                     \
        int f_ = chk_failures;                                                               \
        chk_failures = 0;                                                                    \
        if (f_ != 0) fail_msg("%d bad-input expectation(s) failed (listed above)", f_);      \
    } while (0)

/* ---- devices ---- */

static inline em_device ref_dev(void) {
    em_device d = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    return d;
}

/** A device that no build has: index 7 of ref. */
static inline em_device absent_dev(void) {
    em_device d = {EM_BACKEND_REF, 7, false, EM_CKPT_NONE};
    return d;
}

#define FAKE_ID EM_BACKEND_EXTERNAL0

static em_backend_ops fake_ops;

/** Registers "fake" (a copy of ref's table under another name and id) once per process and
 *  returns its device. */
static inline em_device fake_dev(void) {
    static bool done;
    if (!done) {
        const em_backend_ops *ref = em_backend_get(EM_BACKEND_REF);
        assert_non_null(ref);
        fake_ops = *ref;
        fake_ops.name = "fake";
        fake_ops.id = FAKE_ID;
        assert_int_equal(em_backend_register(&fake_ops), EM_OK);
        done = true;
    }
    em_device d = {FAKE_ID, 0, false, EM_CKPT_NONE};
    return d;
}

/* ---- fixtures ---- */

/** A tensor of dtype dt and the given shape on dev, with values 0, 1, 2, ... (mod 2 for
 *  bool); quantized dtypes are quantized from f32 values. Fails the test if creation fails. */
static inline em_tensor *mk_on(em_device dev, em_dtype dt, const int64_t *shape, int rank) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    bool quant = dt == EM_Q8 || dt == EM_Q4;
    em_dtype src = quant ? EM_F32 : dt;
    size_t es = em_dtype_size(src);
    unsigned char *buf = calloc((size_t)(n > 0 ? n : 1), es);
    assert_non_null(buf);
    for (int64_t i = 0; i < n; i++) {
        double v = dt == EM_BOOL ? (double)(i % 2) : (double)(i % 5);
        unsigned char *p = buf + (size_t)i * es;
        switch (src) {
        case EM_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
        case EM_F64: memcpy(p, &v, 8); break;
        case EM_F16: { uint16_t h = em_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
        case EM_BF16: { uint16_t h = em_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
        case EM_I64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
        case EM_I32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
        case EM_I16: { int16_t x = (int16_t)v; memcpy(p, &x, 2); break; }
        default: *p = (unsigned char)v; break;
        }
    }
    em_tensor *t = NULL;
    em_status s = em_tensor_from_data(buf, src, shape, rank, dev, &t);
    free(buf);
    if (s != EM_OK) fail_msg("fixture: em_tensor_from_data failed: %s", em_last_error());
    if (quant) {
        em_tensor *q = NULL;
        s = em_quantize(t, dt, &q);
        em_tensor_release(t);
        if (s != EM_OK) fail_msg("fixture: em_quantize failed: %s", em_last_error());
        t = q;
    }
    return t;
}

static inline em_tensor *mk(em_dtype dt, const int64_t *shape, int rank) {
    return mk_on(ref_dev(), dt, shape, rank);
}
static inline em_tensor *mk0(em_dtype dt) { return mk(dt, NULL, 0); }
static inline em_tensor *mk1(em_dtype dt, int64_t a) { return mk(dt, &a, 1); }
static inline em_tensor *mk2(em_dtype dt, int64_t a, int64_t b) {
    int64_t s[2] = {a, b};
    return mk(dt, s, 2);
}
static inline em_tensor *mk3(em_dtype dt, int64_t a, int64_t b, int64_t c) {
    int64_t s[3] = {a, b, c};
    return mk(dt, s, 3);
}
static inline em_tensor *mk4(em_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t s[4] = {a, b, c, d};
    return mk(dt, s, 4);
}
/** An int64 tensor with the given values (an index tensor). */
static inline em_tensor *mk_idx(const int64_t *vals, const int64_t *shape, int rank) {
    em_tensor *t = NULL;
    if (em_tensor_from_data(vals, EM_I64, shape, rank, ref_dev(), &t) != EM_OK)
        fail_msg("fixture: index tensor: %s", em_last_error());
    return t;
}

/* ---- kinds: one fixture per kind, used by the op tables ---- */

/** Bit masks of kinds an op must reject with EM_ERR_DTYPE. */
#define K_FLOAT (1u << EM_KIND_FLOAT)
#define K_INT (1u << EM_KIND_INT)
#define K_BOOL (1u << EM_KIND_BOOL)
#define K_QUANT (1u << EM_KIND_QUANTIZED)

/** The dtype used as the fixture of each kind. */
static inline em_dtype kind_dtype(int kind) {
    static const em_dtype dts[4] = {EM_F32, EM_I64, EM_BOOL, EM_Q8};
    return dts[kind];
}

#endif /* EMBER_TEST_ERRCHECK_H */
