#include "python/src/buffer_arg.h"

#include <dlpack/dlpack.h>

#include <bit>
#include <string>

#include "weft/base/error.h"

namespace weft::python {
namespace {

[[noreturn]] void invalid(const char* what, const std::string& why) {
  throw weft::InvalidArgument(std::string(what) + ": " + why);
}

// The buffer protocol's struct-module format. Byte order: native or little-endian only (an
// x86 or Arm host's own); big-endian data ('>', '!') would be reduced as garbage.
std::optional<DType> dtype_of_format(std::string format, py::ssize_t itemsize) {
  static_assert(std::endian::native == std::endian::little);
  if (!format.empty() && std::string("@=<").find(format[0]) != std::string::npos) {
    format.erase(0, 1);
  }
  if (format.size() != 1) return std::nullopt;
  switch (format[0]) {
    case 'f':
      return DType::kFloat32;
    case 'd':
      return DType::kFloat64;
    case 'e':
      return DType::kFloat16;
    case 'b':
      return DType::kInt8;
    case 'B':
      return DType::kUInt8;
    case 'h':
    case 'i':
    case 'l':
    case 'q':
      if (itemsize == 4) return DType::kInt32;
      if (itemsize == 8) return DType::kInt64;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

std::optional<DType> dtype_of_dlpack(const DLDataType& t) {
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 32) return DType::kFloat32;
      if (t.bits == 64) return DType::kFloat64;
      if (t.bits == 16) return DType::kFloat16;
      return std::nullopt;
    case kDLBfloat:
      return t.bits == 16 ? std::optional(DType::kBFloat16) : std::nullopt;
    case kDLInt:
      if (t.bits == 8) return DType::kInt8;
      if (t.bits == 32) return DType::kInt32;
      if (t.bits == 64) return DType::kInt64;
      return std::nullopt;
    case kDLUInt:
      return t.bits == 8 ? std::optional(DType::kUInt8) : std::nullopt;
    default:
      return std::nullopt;
  }
}

// Row-major and dense: what a collective reads as `count` consecutive elements.
template <class Int>
bool c_contiguous(const std::vector<std::int64_t>& shape, const Int* strides, std::int64_t unit) {
  if (strides == nullptr) return true;
  std::int64_t expected = unit;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && static_cast<std::int64_t>(strides[i]) != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::size_t element_count(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

constexpr const char* kNotContiguous =
    "is not contiguous; pass a contiguous one (numpy.ascontiguousarray(a), tensor.contiguous())";

}  // namespace

BufferArg::BufferArg(const py::object& object, const char* what, bool writable) {
  if (PyObject_CheckBuffer(object.ptr())) {
    from_buffer_protocol(object, what, writable);
  } else if (py::hasattr(object, "__dlpack__")) {
    from_dlpack(object, what);
  } else {
    invalid(what, "a " + std::string(py::str(object.get_type().attr("__name__"))) +
                      " exports no memory; pass a numpy array, a torch tensor or another "
                      "object with the buffer protocol or __dlpack__");
  }
}

BufferArg::~BufferArg() = default;

void BufferArg::from_buffer_protocol(const py::object& object, const char* what, bool writable) {
  auto view = std::make_unique<Py_buffer>();
  const int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(object.ptr(), view.get(), flags) != 0) {
    PyErr_Clear();
    invalid(what, writable ? "is read-only, and the collective writes into it"
                           : "its memory cannot be read as a buffer");
  }
  view_.emplace(view.release());  // owns it: PyBuffer_Release and delete on destruction
  const py::buffer_info& info = *view_;
  const auto dtype = dtype_of_format(info.format, info.itemsize);
  if (!dtype) invalid(what, "elements of format '" + info.format + "' are not supported");
  shape_.assign(info.shape.begin(), info.shape.end());
  if (!c_contiguous(shape_, info.strides.data(), info.itemsize)) invalid(what, kNotContiguous);
  buffer_ = dist::Buffer(info.ptr, element_count(shape_), *dtype);
}

void BufferArg::from_dlpack(const py::object& object, const char* what) {
  // torch refuses to export a tensor that requires grad; its detached alias shares the memory
  // (a parameter broadcast in place, as torch.distributed does).
  const bool grad =
      py::hasattr(object, "requires_grad") && object.attr("requires_grad").cast<bool>();
  py::object capsule;
  try {
    capsule = (grad ? object.attr("detach")() : object).attr("__dlpack__")();
  } catch (py::error_already_set& e) {  // torch 1.13 refuses bool, for one
    invalid(what, std::string("its __dlpack__ failed: ") + e.what());
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) {
    PyErr_Clear();
    invalid(what, "__dlpack__ returned something other than an unused DLPack capsule");
  }
  // Consumed: the capsule no longer deletes it, we do (DLPack's protocol).
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  dlpack_.reset(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter != nullptr) m->deleter(m);
  });
  const DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != kDLCPU) {
    invalid(what, "is not in CPU memory (DLPack device type " +
                      std::to_string(t.device.device_type) + "); weft's collectives run on CPUs");
  }
  const auto dtype = dtype_of_dlpack(t.dtype);
  if (!dtype) {
    invalid(what, "DLPack dtype (code " + std::to_string(t.dtype.code) + ", " +
                      std::to_string(t.dtype.bits) + " bits) is not supported");
  }
  shape_.assign(t.shape, t.shape + t.ndim);
  if (!c_contiguous(shape_, t.strides, 1)) invalid(what, kNotContiguous);
  buffer_ =
      dist::Buffer(static_cast<std::byte*>(t.data) + t.byte_offset, element_count(shape_), *dtype);
}

std::optional<BufferArg> optional_buffer(const py::object& object, const char* what,
                                         bool writable) {
  if (object.is_none()) return std::nullopt;
  return BufferArg(object, what, writable);
}

}  // namespace weft::python
