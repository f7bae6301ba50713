// dist::Buffer: a non-owning view of the elements a collective reads or writes.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "weft/base/dtype.h"

namespace weft::dist {

using weft::DType;

// Points at `count` elements of `dtype` at `data`. The memory must stay valid, and must not
// be touched by other threads, until the operation using it has completed.
struct Buffer {
  void* data = nullptr;
  std::size_t count = 0;
  DType dtype = DType::kFloat32;

  Buffer() = default;
  Buffer(void* d, std::size_t n, DType t) : data(d), count(n), dtype(t) {}
  template <Element T>
  Buffer(std::span<T> s) : data(s.data()), count(s.size()), dtype(dtype_of<T>()) {}  // NOLINT
  template <Element T, typename Allocator>
  Buffer(std::vector<T, Allocator>& v)  // NOLINT(google-explicit-constructor)
      : data(v.data()), count(v.size()), dtype(dtype_of<T>()) {}

  std::size_t size_bytes() const { return count * dtype_size(dtype); }
  std::byte* bytes() const { return static_cast<std::byte*>(data); }
};

}  // namespace weft::dist
