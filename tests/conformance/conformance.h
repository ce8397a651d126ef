/*
 * conformance.h — how an op of the conformance table is called.
 *
 * golden.txt (made by gen_golden.py from the modules in cases/) holds each case: op name, parameters,
 * inputs and expected outputs. The runner looks the op name up in the tables of ops_*.c and
 * calls its wrapper, which turns the inputs and parameters into one ember call.
 */
#ifndef EMBER_CONFORMANCE_H
#define EMBER_CONFORMANCE_H

#include <stdbool.h>
#include <stdint.h>

#include "ember/ember.h"

#define CONF_MAX_PARAMS 16
#define CONF_MAX_PARAM_VALUES 16
#define CONF_MAX_IO 8

typedef struct conf_param {
    char key[32];
    int n;                                 /* number of values */
    double values[CONF_MAX_PARAM_VALUES];  /* ints and bools are stored exactly */
} conf_param;

typedef struct conf_params {
    int n;
    conf_param p[CONF_MAX_PARAMS];
    em_device dev; /* the device the case runs on (for creation ops such as random) */
} conf_params;

/** The integer param `key`, or def when absent. */
int64_t conf_int(const conf_params *p, const char *key, int64_t def);
/** The float param `key`, or def when absent. */
double conf_f64(const conf_params *p, const char *key, double def);
/** The bool param `key` (nonzero), or def when absent. */
bool conf_bool(const conf_params *p, const char *key, bool def);
/** Copies up to cap ints of the list param `key` into out; returns their count, or -1 when
 *  absent. */
int conf_ints(const conf_params *p, const char *key, int64_t *out, int cap);
/* A dtype param is written in Python as its name (params={"dtype": "f32"}); gen_golden.py
 * stores it as the em_dtype number, so conf_int(p, "dtype", ...) reads it. */

/** A wrapper: calls ember on in[0..nin) and writes up to CONF_MAX_IO results to out, setting
 *  *nout. It returns the ember status unchanged. */
typedef em_status (*conf_fn)(em_tensor *const *in, int nin, const conf_params *p,
                             em_tensor **out, int *nout);

typedef struct conf_op {
    const char *name;
    conf_fn fn;
} conf_op;

/* One table per family, each ended by {NULL, NULL}. */
extern const conf_op conf_ops_elementwise[];
extern const conf_op conf_ops_reduce[];
extern const conf_op conf_ops_layout[];
extern const conf_op conf_ops_nn[];
extern const conf_op conf_ops_norm[];
extern const conf_op conf_ops_quant[];

#endif
