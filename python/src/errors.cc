#include "python/src/errors.h"

#include <exception>

#include "weft/base/error.h"
#include "weft/dist/errors.h"

namespace weft::python {
namespace {

namespace py = pybind11;

// Created once at import; the interpreter keeps the module (and so the classes) alive.
struct Classes {
  PyObject* error = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* timeout = nullptr;
  PyObject* peer = nullptr;
  PyObject* mismatch = nullptr;
  PyObject* broken = nullptr;
} classes;

// `shown_in`: the module users import the class from ("weft", "weft.dist"), as tracebacks
// name it; the class object itself lives in the extension module `module`.
PyObject* make_class(py::module_& module, const char* shown_in, const char* name, const char* doc,
                     py::tuple bases) {
  const std::string qualified = std::string(shown_in) + "." + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (cls == nullptr) throw py::error_already_set();
  module.add_object(name, py::handle(cls));  // the module holds a reference too
  return cls;
}

void translate(std::exception_ptr e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const weft::InvalidArgument& x) {
    PyErr_SetString(classes.invalid_argument, x.what());
  } catch (const weft::TimeoutError& x) {
    PyErr_SetString(classes.timeout, x.what());
  } catch (const dist::PeerError& x) {
    PyErr_SetString(classes.peer, x.what());
  } catch (const dist::CollectiveMismatch& x) {
    PyErr_SetString(classes.mismatch, x.what());
  } catch (const dist::GroupBroken& x) {
    PyErr_SetString(classes.broken, x.what());
  } catch (const weft::Error& x) {
    PyErr_SetString(classes.error, x.what());
  }
}

}  // namespace

void register_errors(py::module_& weft, py::module_& dist) {
  const py::object builtins = py::module_::import("builtins");
  classes.error = make_class(weft, "weft", "Error", "Every error weft raises.",
                             py::make_tuple(builtins.attr("RuntimeError")));
  const py::handle error(classes.error);
  classes.invalid_argument =
      make_class(weft, "weft", "InvalidArgument",
                 "The call is wrong on this rank (root, sizes, dtype, op); nothing was sent.",
                 py::make_tuple(error, builtins.attr("ValueError")));
  classes.timeout = make_class(
      weft, "weft", "TimeoutError",
      "Peers did not take part in time; the message names the operation and the missing ranks.",
      py::make_tuple(error, builtins.attr("TimeoutError")));
  classes.peer = make_class(dist, "weft.dist", "PeerError",
                            "A peer failed, closed its connection or died; the message names it.",
                            py::make_tuple(error));
  classes.mismatch = make_class(dist, "weft.dist", "CollectiveMismatch",
                                "Ranks called different collectives (WEFT_DIST_DEBUG=detail).",
                                py::make_tuple(error));
  classes.broken = make_class(dist, "weft.dist", "GroupBroken",
                              "An earlier failure left this group unusable; make a new one.",
                              py::make_tuple(error));
  py::register_exception_translator(&translate);
}

}  // namespace weft::python
