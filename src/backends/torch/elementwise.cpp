/* elementwise.cpp — the torch backend's elementwise kernels (torch_internal.h says how they are written). */
#include "torch_internal.h"

void emt_fill_elementwise(em_backend_ops *ops) { (void)ops; }
