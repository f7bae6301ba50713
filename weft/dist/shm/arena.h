// This process's shared arena, and its peers' arenas mapped here: the memory behind
// dist::SharedBuffer. The arena is one memfd as large as the machine's memory, sparse (pages
// exist only once touched) and mapped MAP_SHARED; the shm transport hands each peer its
// descriptor's number and the peer takes a copy with pidfd_getfd (which asks for the same
// permission as process_vm_readv) and maps it too. A collective on buffers inside the ranks'
// arenas then reads and writes the peers' buffers in place, with no copy through the slots and
// no system call (docs/COLLECTIVES.md, "Shared buffers"). Not public.
//
// Both mappings are MADV_DONTFORK: a forked child has neither (it gets an arena of its own on
// first use), so that it never writes a parent's buffers. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>

#include "weft/base/unique_fd.h"

namespace weft::dist::shm {

class Arena {
 public:
  // This process's arena, made on first use (again in a forked child).
  static Arena& instance();

  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  std::byte* base() const { return base_; }
  std::size_t capacity() const { return capacity_; }
  int fd() const { return fd_.get(); }

  // `bytes` rounded up to whole pages, zero-filled, page-aligned. Throws weft::Error when the
  // arena has no free range that large.
  std::byte* allocate(std::size_t bytes);
  // Gives back what allocate(bytes) returned: its pages go back to the system.
  void free(std::byte* block, std::size_t bytes) noexcept;

 private:
  Arena();
  static std::size_t rounded(std::size_t bytes);

  UniqueFd fd_;
  std::byte* base_ = nullptr;
  std::size_t capacity_ = 0;
  std::mutex mu_;
  std::map<std::size_t, std::size_t> free_;  // offset -> length, coalesced; guarded by mu_
};

// Where [p, p + bytes) starts in `arena` (an arena as mapped here), or -1 unless it lies
// wholly inside.
std::int64_t offset_in(std::span<const std::byte> arena, const void* p, std::size_t bytes);

// Another process's arena, mapped here for as long as this object lives.
class PeerArena {
 public:
  // Maps the arena that process `pid` holds as descriptor `fd`, of `bytes`; empty (base() null)
  // when the system refuses (no pidfd_getfd, a ptrace policy) or the file is not that size.
  static PeerArena map(int pid, int fd, std::size_t bytes);

  PeerArena() = default;
  PeerArena(PeerArena&& other) noexcept;
  PeerArena& operator=(PeerArena&& other) noexcept;
  ~PeerArena();

  std::byte* base() const { return base_; }
  std::size_t size() const { return bytes_; }

 private:
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace weft::dist::shm
