// The extension module weft._torch: weft's process groups as torch.distributed's (c10d)
// process groups. python/weft/torch.py registers it as the backend "weft".
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>  // c10::intrusive_ptr as a pybind11 holder

#include "python/src/interrupt.h"
#include "python/src/torch/process_group.h"

namespace py = pybind11;
using weft::torch_backend::TorchProcessGroup;

PYBIND11_MODULE(_torch, m) {
  m.doc() = "weft as a torch.distributed backend; import weft.torch instead.";
  // The base classes (c10d.ProcessGroup, c10d.Store) are torch's pybind11 types.
  py::module_::import("torch.distributed");
  py::class_<TorchProcessGroup, c10d::ProcessGroup, c10::intrusive_ptr<TorchProcessGroup>>(
      m, "ProcessGroupWeft",
      "A torch.distributed process group whose collectives run on weft (docs/PYTHON.md).")
      .def(py::init<const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds>(),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>(),
           "Joins the group's other ranks through `store`; `timeout` bounds the rendezvous "
           "and is every operation's default deadline.")
      .def_property_readonly("weft_backend", &TorchProcessGroup::weft_backend,
                             "The weft backend the group runs on: shm, tcp, auto, ...");
  m.def("_caller_waits", &weft::torch_backend::set_caller_waits, py::arg("on"),
        "Internal (weft.torch wraps torch.distributed's blocking calls with it): on this "
        "thread, the operations torch.distributed issues are waited for at once, so weft may "
        "run them right here. Returns the previous setting.");
  m.def("_arm_interrupts", &weft::python::arm_interrupts,
        "Internal: puts weft's Ctrl-C watcher back in front of Python's SIGINT handler, which "
        "signal.signal() reinstalls (weft.torch calls it when the handler changed).");
}
