#include "weft/tensor/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <utility>
#include <vector>

#include "weft/base/check.h"
#include "weft/tensor/mappings.h"

namespace weft {
namespace {

constexpr std::size_t kAlignment = 64;
constexpr std::size_t kMapBytes = mappings::kMinBytes;

[[noreturn]] void invalid(const std::string& what) { throw InvalidArgument("Tensor: " + what); }

// Calls visit(element offset) for every element of (shape, strides) from `offset`, in
// row-major order.
void for_each_offset(const Shape& shape, const Shape& strides, std::int64_t offset,
                     const std::function<void(std::int64_t)>& visit) {
  if (shape_numel(shape) == 0) return;
  const int n = static_cast<int>(shape.size());
  if (n == 0) return visit(offset);
  std::vector<std::int64_t> index(static_cast<std::size_t>(n), 0);
  for (;;) {
    std::int64_t at = offset;
    for (int d = 0; d < n; ++d)
      at += index[static_cast<std::size_t>(d)] * strides[static_cast<std::size_t>(d)];
    visit(at);
    int d = n - 1;
    while (d >= 0 && ++index[static_cast<std::size_t>(d)] == shape[static_cast<std::size_t>(d)]) {
      index[static_cast<std::size_t>(d)] = 0;
      --d;
    }
    if (d < 0) return;
  }
}

template <class T>
double load_as_double(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

template <class T>
void store_from_double(std::byte* p, double x) {
  T v;
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    v = T(static_cast<float>(x));
  } else {
    v = static_cast<T>(x);
  }
  std::memcpy(p, &v, sizeof(T));
}

double load(DType dtype, const std::byte* p) {
  switch (dtype) {
    case DType::kFloat32:
      return load_as_double<float>(p);
    case DType::kFloat64:
      return load_as_double<double>(p);
    case DType::kFloat16:
      return load_as_double<Half>(p);
    case DType::kBFloat16:
      return load_as_double<BFloat16>(p);
    case DType::kInt8:
      return load_as_double<std::int8_t>(p);
    case DType::kUInt8:
      return load_as_double<std::uint8_t>(p);
    case DType::kInt32:
      return load_as_double<std::int32_t>(p);
    case DType::kInt64:
      return load_as_double<std::int64_t>(p);
  }
  WEFT_CHECK(false && "unknown dtype");
  return 0;
}

void store(DType dtype, std::byte* p, double x) {
  switch (dtype) {
    case DType::kFloat32:
      return store_from_double<float>(p, x);
    case DType::kFloat64:
      return store_from_double<double>(p, x);
    case DType::kFloat16:
      return store_from_double<Half>(p, x);
    case DType::kBFloat16:
      return store_from_double<BFloat16>(p, x);
    case DType::kInt8:
      return store_from_double<std::int8_t>(p, x);
    case DType::kUInt8:
      return store_from_double<std::uint8_t>(p, x);
    case DType::kInt32:
      return store_from_double<std::int32_t>(p, x);
    case DType::kInt64:
      return store_from_double<std::int64_t>(p, x);
  }
  WEFT_CHECK(false && "unknown dtype");
}

}  // namespace

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) {
    const auto i = static_cast<std::size_t>(d);
    strides[i] = strides[i + 1] * std::max<std::int64_t>(shape[i + 1], 1);
  }
  return strides;
}

Storage::Storage(std::size_t bytes) : bytes_(bytes) { restore(); }

Storage::~Storage() { release(); }

std::size_t Storage::rounded() const {
  return (std::max<std::size_t>(bytes_, 1) + kAlignment - 1) / kAlignment * kAlignment;
}

// malloc keeps freed large blocks for reuse (its mmap threshold grows with every freed
// mapping), so memory freed between layers would stay in the resident set beyond the
// program's peak; large blocks come from weft's own mappings instead (mappings.h).
void Storage::restore() {
  if (data_ != nullptr) return;
  if (bytes_ >= kMapBytes) {
    data_ = static_cast<std::byte*>(mappings::take(rounded()));
    return;
  }
  data_ = static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded()));
  if (data_ == nullptr) throw std::bad_alloc();
  std::memset(data_, 0, rounded());
}

void Storage::release() {
  if (data_ == nullptr) return;
  if (bytes_ < kMapBytes) {
    std::free(data_);
  } else {
    mappings::give(data_, rounded());
  }
  data_ = nullptr;
}

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, std::int64_t offset,
               DType dtype)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      dtype_(dtype) {}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  for (std::int64_t d : shape) {
    if (d < 0) invalid("negative size in shape " + shape_string(shape));
  }
  const auto bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(std::make_shared<Storage>(bytes), shape, contiguous_strides(shape), 0, dtype);
}

template <class T>
Tensor Tensor::from(std::span<const T> values, const Shape& shape) {
  if (static_cast<std::int64_t>(values.size()) != shape_numel(shape)) {
    invalid("from: " + std::to_string(values.size()) + " values for shape " + shape_string(shape) +
            " (" + std::to_string(shape_numel(shape)) + " elements)");
  }
  Tensor t = zeros(shape, dtype_of<T>());
  if (!values.empty()) std::memcpy(t.data<T>(), values.data(), values.size_bytes());
  return t;
}

int Tensor::wrap_dim(int dim) const {
  const int n = ndim();
  const int d = dim < 0 ? dim + n : dim;
  if (d < 0 || d >= n) {
    invalid("dimension " + std::to_string(dim) + " is out of range for a tensor of shape " +
            shape_string(shape_));
  }
  return d;
}

std::int64_t Tensor::size(int dim) const { return shape_[static_cast<std::size_t>(wrap_dim(dim))]; }

bool Tensor::is_contiguous() const {
  if (numel() <= 1) return true;
  return strides_ == contiguous_strides(shape_);
}

template <class T>
T* Tensor::data() const {
  if (dtype_of<T>() != dtype_) {
    invalid("data<" + std::string(dtype_name(dtype_of<T>())) + ">() on a " +
            std::string(dtype_name(dtype_)) + " tensor");
  }
  if (!storage_) return nullptr;
  return reinterpret_cast<T*>(element_bytes(offset_));
}

std::byte* Tensor::element_bytes(std::int64_t offset) const {
  if (!storage_->resident()) {
    invalid(
        "its storage is released (sharded data parallelism frees a layer's full "
        "parameters and gradients between uses; read them through the sharding's full state)");
  }
  return storage_->data() + static_cast<std::size_t>(offset) * dtype_size(dtype_);
}

Tensor Tensor::narrow(int dim, std::int64_t start, std::int64_t length) const {
  const auto d = static_cast<std::size_t>(wrap_dim(dim));
  if (start < 0 || length < 0 || start + length > shape_[d]) {
    invalid("narrow(" + std::to_string(dim) + ", " + std::to_string(start) + ", " +
            std::to_string(length) + ") is outside size " + std::to_string(shape_[d]) +
            " of shape " + shape_string(shape_));
  }
  Shape shape = shape_;
  shape[d] = length;
  return Tensor(storage_, std::move(shape), strides_, offset_ + start * strides_[d], dtype_);
}

Tensor Tensor::slice(int dim, std::int64_t start, std::int64_t end) const {
  const std::int64_t n = size(dim);
  auto clamp = [n](std::int64_t i) { return std::clamp<std::int64_t>(i < 0 ? i + n : i, 0, n); };
  const std::int64_t first = clamp(start);
  return narrow(dim, first, std::max<std::int64_t>(0, clamp(end) - first));
}

Tensor Tensor::transpose(int dim0, int dim1) const {
  const auto a = static_cast<std::size_t>(wrap_dim(dim0));
  const auto b = static_cast<std::size_t>(wrap_dim(dim1));
  Shape shape = shape_;
  Shape strides = strides_;
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return Tensor(storage_, std::move(shape), std::move(strides), offset_, dtype_);
}

Tensor Tensor::view(Shape shape) const {
  const auto inferred = std::count(shape.begin(), shape.end(), std::int64_t{-1});
  if (inferred > 1) invalid("view: more than one -1 in " + shape_string(shape));
  if (inferred == 1) {
    std::int64_t known = 1;
    for (std::int64_t d : shape) known *= d == -1 ? 1 : d;
    if (known == 0 || numel() % known != 0) {
      invalid("view: cannot infer -1 in " + shape_string(shape) + " for " +
              std::to_string(numel()) + " elements");
    }
    *std::find(shape.begin(), shape.end(), std::int64_t{-1}) = numel() / known;
  }
  if (shape_numel(shape) != numel()) {
    invalid("view: shape " + shape_string(shape) + " has " + std::to_string(shape_numel(shape)) +
            " elements, the tensor " + shape_string(shape_) + " has " + std::to_string(numel()));
  }
  if (!is_contiguous()) invalid("view of a non-contiguous tensor; use reshape or contiguous()");
  Shape strides = contiguous_strides(shape);
  return Tensor(storage_, std::move(shape), std::move(strides), offset_, dtype_);
}

Tensor Tensor::reshape(Shape shape) const {
  return is_contiguous() ? view(std::move(shape)) : contiguous().view(std::move(shape));
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = zeros(shape_, dtype_);
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape_ != shape_ || src.dtype_ != dtype_) {
    invalid("copy_from: source " + shape_string(src.shape_) + " " +
            std::string(dtype_name(src.dtype_)) + " into " + shape_string(shape_) + " " +
            std::string(dtype_name(dtype_)));
  }
  if (numel() == 0) return;
  const std::size_t esz = dtype_size(dtype_);
  if (is_contiguous() && src.is_contiguous()) {
    std::memmove(element_bytes(offset_), src.element_bytes(src.offset_), nbytes());
    return;
  }
  std::vector<std::int64_t> from;
  from.reserve(static_cast<std::size_t>(numel()));
  for_each_offset(src.shape_, src.strides_, src.offset_,
                  [&](std::int64_t at) { from.push_back(at); });
  std::size_t i = 0;
  for_each_offset(shape_, strides_, offset_, [&](std::int64_t at) {
    std::memcpy(element_bytes(at), src.element_bytes(from[i++]), esz);
  });
}

void Tensor::fill(double value) {
  if (!storage_) return;
  if (value == 0.0 && is_contiguous()) {  // zero_grad: every dtype's zero is all-zero bits
    std::memset(element_bytes(offset_), 0, nbytes());
    return;
  }
  for_each_offset(shape_, strides_, offset_,
                  [&](std::int64_t at) { store(dtype_, element_bytes(at), value); });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> out;
  out.reserve(static_cast<std::size_t>(numel()));
  if (!storage_) return out;
  for_each_offset(shape_, strides_, offset_, [&](std::int64_t at) {
    out.push_back(static_cast<T>(load(dtype_, element_bytes(at))));
  });
  return out;
}

#define WEFT_TENSOR_INSTANTIATE(T)                                   \
  template Tensor Tensor::from<T>(std::span<const T>, const Shape&); \
  template T* Tensor::data<T>() const;
WEFT_TENSOR_INSTANTIATE(float)
WEFT_TENSOR_INSTANTIATE(double)
WEFT_TENSOR_INSTANTIATE(BFloat16)
WEFT_TENSOR_INSTANTIATE(std::int32_t)
WEFT_TENSOR_INSTANTIATE(std::int64_t)
WEFT_TENSOR_INSTANTIATE(std::uint8_t)
#undef WEFT_TENSOR_INSTANTIATE
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>() const;

}  // namespace weft
