// The Python exceptions weft raises, and the translation of its C++ errors into them:
//
//   weft.Error(RuntimeError)                 weft::Error, and anything below not listed
//   weft.InvalidArgument(Error, ValueError)  weft::InvalidArgument (dist:: too)
//   weft.TimeoutError(Error, TimeoutError)   weft::TimeoutError (dist:: too)
//   weft.dist.PeerError(Error)               dist::PeerError
//   weft.dist.CollectiveMismatch(Error)      dist::CollectiveMismatch
//   weft.dist.GroupBroken(Error)             dist::GroupBroken
//
// so that `except ValueError` and `except TimeoutError` work as Python users expect, and
// `except weft.Error` catches everything weft raises.
#pragma once

#include <pybind11/pybind11.h>

namespace weft::python {

void register_errors(pybind11::module_& weft, pybind11::module_& dist);

}  // namespace weft::python
