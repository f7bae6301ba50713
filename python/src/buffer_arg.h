// A Python object as the memory of a collective, without copying: anything with the buffer
// protocol (numpy arrays, bytearray, memoryview, array.array) or DLPack (torch tensors,
// and numpy arrays too). Not public: the bindings' own.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <vector>

#include "weft/dist/buffer.h"

namespace weft::python {

namespace py = pybind11;

// Holds the exporter's memory alive (a Py_buffer, or a DLPack tensor we took ownership of)
// and describes it as a dist::Buffer. Destroy with the GIL held.
class BufferArg {
 public:
  // `what` names the argument in errors ("tensor", "output"). `writable`: the collective
  // writes into it (a read-only buffer is then a ValueError). Throws weft::InvalidArgument
  // (ValueError) for unsupported dtypes, devices, non-contiguous memory or objects that
  // export no memory at all.
  BufferArg(const py::object& object, const char* what, bool writable);
  BufferArg(BufferArg&&) noexcept = default;
  BufferArg& operator=(BufferArg&&) noexcept = default;
  ~BufferArg();

  const dist::Buffer& buffer() const { return buffer_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }

 private:
  void from_buffer_protocol(const py::object& object, const char* what, bool writable);
  void from_dlpack(const py::object& object, const char* what);

  dist::Buffer buffer_;
  std::vector<std::int64_t> shape_;
  std::optional<py::buffer_info> view_;  // buffer protocol: released on destruction
  std::shared_ptr<void> dlpack_;         // DLPack: the producer's deleter on destruction
};

// An optional argument (gather's output off the root): None is no buffer.
std::optional<BufferArg> optional_buffer(const py::object& object, const char* what, bool writable);

}  // namespace weft::python
