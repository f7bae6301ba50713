// weft.dist's classes and functions: ProcessGroup, Work, ReduceOp, init_process_group.
#pragma once

#include <pybind11/pybind11.h>

namespace weft::python {

void bind_dist(pybind11::module_& dist);

}  // namespace weft::python
