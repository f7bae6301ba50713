// weft::Tensor: an n-dimensional view (shape, strides in elements, offset) of a reference-
// counted, 64-byte aligned storage. Views (narrow, transpose, reshape of contiguous data,
// view) share the storage and copy nothing; contiguous() and clone() copy.
//
//   Tensor x = Tensor::zeros({8, 256});          // float32
//   Tensor rows = x.narrow(0, 2, 4);             // rows 2..5, no copy
//   Tensor xt = x.transpose(0, 1).contiguous();  // a copy in the new layout
//   float* p = rows.data<float>();               // checks the dtype
//
// Shapes and indices are int64 (as PyTorch's); a negative or out-of-range dimension, a size
// that does not match, or a dtype mismatch throws weft::InvalidArgument naming both values.
// Thread-safety: distinct Tensors may be used from different threads; the storage is
// shared, so writers to one storage must synchronize as for any shared memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weft/base/dtype.h"
#include "weft/base/error.h"

namespace weft {

using Shape = std::vector<std::int64_t>;

std::string shape_string(const Shape& shape);  // "[8, 256]"
std::int64_t shape_numel(const Shape& shape);

// Bytes owned by one or more tensors; 64-byte aligned, zero-filled on creation. Blocks of
// 256 KiB and more are mapped from the kernel directly (mappings.h): released blocks are
// kept for reuse by blocks of the same size only while that keeps the resident set within the
// program's own peak, so the peak resident memory shows what a program holds at its peak.
// Blocks of 2 MiB and more ask for transparent huge pages (madvise; the system may refuse):
// training's large activations are read in strided rows and long streams, and 4 KiB pages
// cost a TLB miss per row (docs/TRAINING.md).
//
// release() frees the bytes while every view keeps its place in the storage; restore()
// allocates them again, zero-filled. This is how sharded data parallelism frees a layer's
// full parameters between uses without its modules noticing (PyTorch FSDP's storage resize).
// Reading or writing a released storage's elements through a Tensor throws InvalidArgument.
class Storage {
 public:
  explicit Storage(std::size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  std::byte* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  bool resident() const { return data_ != nullptr; }
  void release();
  void restore();  // no-op when resident

 private:
  std::size_t rounded() const;

  std::byte* data_ = nullptr;
  std::size_t bytes_;
};

class Tensor {
 public:
  Tensor() = default;  // an empty tensor: no storage, shape [0]

  static Tensor zeros(const Shape& shape, DType dtype = DType::kFloat32);
  // Copies `values`; their count must equal the shape's.
  template <class T>
  static Tensor from(std::span<const T> values, const Shape& shape);
  template <class T>
  static Tensor from(const std::vector<T>& values, const Shape& shape) {
    return from(std::span<const T>(values), shape);
  }

  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  DType dtype() const { return dtype_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t size(int dim) const;  // negative dims count from the end
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return storage_ != nullptr; }
  bool is_contiguous() const;
  // Whether the two share storage (views of one another, or of a common tensor).
  bool shares_storage(const Tensor& other) const { return storage_ == other.storage_; }
  // The storage itself (null for an empty tensor), to release and restore it.
  Storage* storage() const { return storage_.get(); }

  // The first element; T must match dtype().
  template <class T>
  T* data() const;
  // The first element's bytes, whatever the dtype (file formats, transports).
  std::byte* bytes() const { return storage_ ? element_bytes(offset_) : nullptr; }
  // (data(), bytes() and every copy throw InvalidArgument when the storage is released.)

  // Views, no copies.
  Tensor narrow(int dim, std::int64_t start, std::int64_t length) const;
  // Elements start <= i < end of `dim`, Python's way: negative bounds count from the end and
  // bounds beyond the size are clamped (x.slice(0, -2, INT64_MAX) is the last two rows).
  Tensor slice(int dim, std::int64_t start, std::int64_t end) const;
  Tensor transpose(int dim0, int dim1) const;
  // Same elements in a new shape; needs a contiguous tensor (else use reshape). One entry of
  // `shape` may be -1: inferred.
  Tensor view(Shape shape) const;
  // view() when contiguous, else a contiguous copy viewed.
  Tensor reshape(Shape shape) const;

  // Copies.
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  // Copies `src` (same shape and dtype, any layout) into this tensor's elements.
  void copy_from(const Tensor& src);
  void fill(double value);
  // The elements in row-major order, converted to T (bfloat16 and integers too).
  template <class T>
  std::vector<T> to_vector() const;

 private:
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, std::int64_t offset,
         DType dtype);
  int wrap_dim(int dim) const;
  std::byte* element_bytes(std::int64_t offset) const;

  std::shared_ptr<Storage> storage_;
  Shape shape_{0};
  Shape strides_{1};
  std::int64_t offset_ = 0;  // in elements
  DType dtype_ = DType::kFloat32;
};

// Row-major strides of a contiguous tensor of `shape`.
Shape contiguous_strides(const Shape& shape);

}  // namespace weft
