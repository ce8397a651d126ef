/*
 * rules.h — the backward rules, one per differentiable op, declared for the ops that record
 * them. Each rule lives in src/autodiff/rules/<family>.c next to nothing but other rules.
 */
#ifndef EMBER_RULES_H
#define EMBER_RULES_H

#include "autodiff/autodiff.h"

/* convert.c */
extern const emi_ad_rule emi_rule_cast;      /* params: em_dtype (the target) */
extern const emi_ad_rule emi_rule_clone;     /* params: em_dtype (ignored) */
extern const emi_ad_rule emi_rule_to_device; /* params: em_device (the source, inner) */

/* elementwise_unary.c: indexed by em_unary_op (NULL for ops with no float result). */
typedef struct emi_rule_unary_params {
    em_unary_op op;
    double p[2]; /* EM_UN_CLAMP: lo, hi */
} emi_rule_unary_params;
extern const emi_ad_rule *const emi_rules_unary[EM_UN_COUNT];

/* elementwise_binary.c: indexed by em_binary_op (NULL for comparisons and logical ops);
 * params: the em_binary_op. */
extern const emi_ad_rule *const emi_rules_binary[EM_BIN_COUNT];

/* elementwise_scalar.c: a op s, indexed by em_binary_op; params: emi_rule_scalar_params. */
typedef struct emi_rule_scalar_params {
    em_binary_op op;
    double s; /* already in a's dtype */
} emi_rule_scalar_params;
extern const emi_ad_rule *const emi_rules_scalar[EM_BIN_COUNT];

/* elementwise_binary.c: where(cond, a, b) with inputs (a, b, cond); no params. */
extern const emi_ad_rule emi_rule_where;

#endif
