/* reduce.cpp — the torch backend's reduce kernels (torch_internal.h says how they are written). */
#include "torch_internal.h"

void emt_fill_reduce(em_backend_ops *ops) { (void)ops; }
