/*
 * golden.h — reading golden.txt, the data of the conformance table (written by gen_golden.py):
 * shared by the table's runner and by the gradient check, which both run its cases.
 */
#ifndef EMBER_GOLDEN_H
#define EMBER_GOLDEN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "conformance.h"

/** One tensor of a case: its dtype, shape and values, and the view built on it. */
typedef struct golden_tensor {
    em_dtype dt;
    int rank;
    int64_t shape[EM_MAX_RANK];
    int64_t n;
    double *vals;   /* every value as a double (ints up to 2^53 exact) */
    int64_t *ivals; /* ints and bools, exact */
    char view_kind[16];
    int nview;
    int64_t view_args[16];
    bool view_none[16];
} golden_tensor;

typedef struct golden_case {
    char name[200];
    char op[64];
    conf_params params;
    int nin, nout;
    golden_tensor in[CONF_MAX_IO];
    golden_tensor out[CONF_MAX_IO];
    char error[32]; /* the expected status name, or "" */
    bool has_tol;
    double rtol, atol;
} golden_case;

/** Reads the next case of f into c (freeing what c held). Returns 1 for a case, 0 at the end
 *  of the file, -1 for a line it cannot parse (reported on stderr with path and line). */
int golden_next(FILE *f, const char *path, int *lineno, golden_case *c);
/** Frees what a case holds (c itself stays). */
void golden_free(golden_case *c);
/** The case's view of input t applied to base (a new reference: base itself, retained, when
 *  the input has no view). */
em_status golden_view(const golden_tensor *t, em_tensor *base, em_tensor **out);
/** The wrapper of op `name` in the tables of ops_*.c, or NULL. */
conf_fn golden_find_op(const char *name);
/** True for the float dtypes. */
bool golden_is_float(em_dtype dt);

#endif
