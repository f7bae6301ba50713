// dist::SharedBuffer: memory that the other processes of an shm job can map, the counterpart
// of NCCL's registered buffers. On the shm backend, an all-reduce whose buffers are SharedBuffers
// on every rank runs in place: each rank reduces its slice of every rank's buffer and writes the
// result straight into the others', one pass over memory where private buffers take two through the
// shared slots; a broadcast from a root's SharedBuffer is one copy out of it (docs/COLLECTIVES.md,
// "Shared buffers"). Other operations and backends take a SharedBuffer as any other memory.
//
//   weft::dist::SharedBuffer grads(n * sizeof(float));  // zero-filled
//   pg.all_reduce(grads.as<float>(), weft::dist::ReduceOp::kSum);
//
// The memory is this process's arena (a memfd as large as the machine's memory, sparse),
// which the job's peers map when the shm backend starts: peers may read and write it during
// a collective on it. A process forked after allocating one does not have it (the child's
// touching it faults); it gets an arena of its own. Thread-safe to create and destroy.
#pragma once

#include <cstddef>
#include <span>

namespace weft::dist {

class SharedBuffer {
 public:
  SharedBuffer() = default;
  // `bytes` of zeros, page-aligned. Throws weft::Error when the arena is exhausted.
  explicit SharedBuffer(std::size_t bytes);
  ~SharedBuffer();
  SharedBuffer(SharedBuffer&& other) noexcept;
  SharedBuffer& operator=(SharedBuffer&& other) noexcept;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;

  std::byte* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  // The bytes as elements of T (the size rounded down to whole elements).
  template <class T>
  std::span<T> as() const {
    return {reinterpret_cast<T*>(data_), bytes_ / sizeof(T)};
  }

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  int pid_ = 0;  // the process whose arena holds it: a forked child frees nothing
};

}  // namespace weft::dist
