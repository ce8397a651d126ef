/* nn.cpp — the torch backend's nn kernels (torch_internal.h says how they are written). */
#include "torch_internal.h"

void emt_fill_nn(em_backend_ops *ops) { (void)ops; }
