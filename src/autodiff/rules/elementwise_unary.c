#include "autodiff/rules/rules.h"
const emi_ad_rule *const emi_rules_unary[EM_UN_COUNT] = {0};
const emi_ad_rule *const emi_rules_scalar[EM_BIN_COUNT] = {0};
