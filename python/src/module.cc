// The extension module weft._weft; the package weft (python/weft) re-exports it.
#include <pybind11/pybind11.h>

#include "python/src/dist_bindings.h"
#include "python/src/errors.h"

PYBIND11_MODULE(_weft, m) {
  m.doc() = "weft's C++ core; import weft and weft.dist instead.";
  pybind11::module_ dist = m.def_submodule("dist", "Process groups and their collectives.");
  weft::python::register_errors(m, dist);
  weft::python::bind_dist(dist);
}
