/*
 * binary.c — the public arithmetic binary ops (same dtype, broadcast), their `_scalar` forms
 * and the consuming `_` variants that write into their first input's buffer when they may.
 */
#include "ops/elementwise.h"

/* Defines em_<name>(a, b, out) and em_<name>_scalar(a, s, out) for op over kind k. */
#define EW_BINARY(name, op, k)                                                               \
    em_status em_##name(const em_tensor *a, const em_tensor *b, em_tensor **out) {           \
        return ew_binary("em_" #name, op, k, a, b, out);                                     \
    }                                                                                        \
    em_status em_##name##_scalar(const em_tensor *a, double s, em_tensor **out) {            \
        return ew_scalar("em_" #name "_scalar", op, k, a, s, out);                           \
    }

EW_BINARY(add, EM_BIN_ADD, EW_NUMERIC)
EW_BINARY(sub, EM_BIN_SUB, EW_NUMERIC)
EW_BINARY(mul, EM_BIN_MUL, EW_NUMERIC)
EW_BINARY(div, EM_BIN_DIV, EW_NUMERIC)
EW_BINARY(pow, EM_BIN_POW, EW_FLOAT)
EW_BINARY(remainder, EM_BIN_REM, EW_NUMERIC)
EW_BINARY(maximum, EM_BIN_MAX, EW_NUMERIC)
EW_BINARY(minimum, EM_BIN_MIN, EW_NUMERIC)

/* Defines the consuming em_<name>_(a, b, out): a is released, or becomes *out when reused. */
#define EW_BINARY_(name, op)                                                                 \
    em_status em_##name##_(em_tensor *a, const em_tensor *b, em_tensor **out) {              \
        return ew_binary_("em_" #name "_", op, EW_NUMERIC, a, b, out);                       \
    }

EW_BINARY_(add, EM_BIN_ADD)
EW_BINARY_(sub, EM_BIN_SUB)
EW_BINARY_(mul, EM_BIN_MUL)
EW_BINARY_(div, EM_BIN_DIV)

/* Consuming scalar forms. */
em_status em_mul_scalar_(em_tensor *a, double s, em_tensor **out) {
    return ew_scalar_("em_mul_scalar_", EM_BIN_MUL, EW_NUMERIC, a, s, out);
}

em_status em_add_scalar_(em_tensor *a, double s, em_tensor **out) {
    return ew_scalar_("em_add_scalar_", EM_BIN_ADD, EW_NUMERIC, a, s, out);
}

/* atan2(a, b), float only (no scalar or consuming form). */
em_status em_atan2(const em_tensor *a, const em_tensor *b, em_tensor **out) {
    return ew_binary("em_atan2", EM_BIN_ATAN2, EW_FLOAT, a, b, out);
}
