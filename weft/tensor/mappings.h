#pragma once

// Large blocks of memory mapped from the kernel for Storage and MappedVector, with released
// ones kept for reuse under the peak: training allocates the same sizes layer after layer and
// step after step (sharded data parallelism's whole units and buffers, activation
// checkpointing's recomputed blocks), and a fresh mapping costs a page fault per page it
// touches (a quarter of the step of FSDP with checkpointing on llama_512).
//
// A block given back is kept. A request that no kept block of its size answers maps a new
// block, first unmapping the oldest kept blocks until (1) the blocks in use and kept fit
// within the most ever in use at once, and (2) the resident set plus the new block fits
// within the process's peak resident set so far. Kept blocks are trimmed only then: memory
// allocated by other means (malloc, storages under 256 KiB) may still find them resident, and
// a process that only frees keeps its peak of mapped memory, as glibc's malloc does.

#include <cstddef>
#include <new>
#include <vector>

namespace weft::mappings {

// Blocks from this size up are mapped; smaller ones come from the heap.
inline constexpr std::size_t kMinBytes = std::size_t{256} << 10;

// A block of `bytes` (a multiple of 64): a kept block of that size (zero-filled if `zeroed`)
// or a new mapping (zero-filled; asking for transparent huge pages from 2 MiB). Throws
// std::bad_alloc.
void* take(std::size_t bytes, bool zeroed = true);

// Gives back a block from take() of the same `bytes`, to be kept for reuse.
void give(void* block, std::size_t bytes) noexcept;

struct Usage {
  std::size_t in_use = 0;  // taken and not given back
  std::size_t kept = 0;    // given back and kept for reuse
  std::size_t peak = 0;    // the most ever in use at once: in_use + kept stays within it
};
Usage usage();

// An allocator for containers of large buffers (sharded data parallelism's shards and
// buffers), so that their memory and Storage's are kept and reused as one.
template <typename T>
struct Allocator {
  static_assert(alignof(T) <= 64);
  using value_type = T;
  Allocator() = default;
  template <typename U>
  Allocator(const Allocator<U>&) {}  // NOLINT(google-explicit-constructor): rebinding

  T* allocate(std::size_t n) {
    const std::size_t bytes = rounded(n);
    if (bytes < kMinBytes) return static_cast<T*>(::operator new (bytes, std::align_val_t{64}));
    return static_cast<T*>(take(bytes));
  }
  void deallocate(T* p, std::size_t n) {
    const std::size_t bytes = rounded(n);
    if (bytes < kMinBytes) return ::operator delete (p, std::align_val_t{64});
    give(p, bytes);
  }
  friend bool operator==(const Allocator&, const Allocator&) { return true; }

 private:
  static std::size_t rounded(std::size_t n) { return (n * sizeof(T) + 63) / 64 * 64; }
};

}  // namespace weft::mappings

namespace weft {
template <typename T>
using MappedVector = std::vector<T, mappings::Allocator<T>>;
}  // namespace weft
