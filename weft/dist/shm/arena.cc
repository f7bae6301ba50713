#include "weft/dist/shm/arena.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "weft/base/error.h"

namespace weft::dist::shm {
namespace {

constexpr std::size_t kGiB = std::size_t{1} << 30;

std::size_t page_bytes() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

// As large as the machine's memory: no buffer of one process can be larger, and the pages
// exist only once touched.
std::size_t machine_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const std::size_t bytes = pages > 0 ? static_cast<std::size_t>(pages) * page_bytes() : kGiB;
  return (bytes + kGiB - 1) / kGiB * kGiB;
}

std::byte* map_shared(int fd, std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  ::madvise(p, bytes, MADV_DONTFORK);
  return static_cast<std::byte*>(p);
}

// The instance, the process it belongs to, and the lock that guards both. The lock is held
// across fork (pthread_atfork) so that a child never inherits it taken.
std::mutex instance_mu;
Arena* current = nullptr;
Arena* inherited = nullptr;  // the parent's, in a forked child
pid_t current_pid = 0;

void register_fork_handlers() {
  static const int registered = ::pthread_atfork(
      [] { instance_mu.lock(); }, [] { instance_mu.unlock(); }, [] { instance_mu.unlock(); });
  (void)registered;
}

}  // namespace

Arena& Arena::instance() {
  register_fork_handlers();
  const std::lock_guard lock(instance_mu);
  // A forked child has no mapping of its parent's arena (MADV_DONTFORK), and may by now have
  // mapped other memory where it was. The parent's object only closes the child's copy of its
  // descriptor; it is kept (reachable), as another thread may have been changing it at the fork.
  if (current != nullptr && current_pid != ::getpid()) {
    current->fd_.reset();
    inherited = std::exchange(current, nullptr);
  }
  if (current == nullptr) {
    current = new Arena();  // lives as long as the process: buffers may be freed at its exit
    current_pid = ::getpid();
  }
  return *current;
}

Arena::Arena()
    : fd_(::memfd_create("weft-shared-buffers", MFD_CLOEXEC)), capacity_(machine_bytes()) {
  if (!fd_) throw SystemError("shm: memfd_create for the shared arena", errno);
  if (::ftruncate(fd_.get(), static_cast<off_t>(capacity_)) != 0) {
    throw SystemError("shm: sizing the shared arena", errno);
  }
  base_ = map_shared(fd_.get(), capacity_);
  if (base_ == nullptr) {
    const int error = errno;
    throw SystemError("shm: mapping the shared arena (" + std::to_string(capacity_ >> 30) +
                          " GiB of address space, no memory until used; is `ulimit -v` set?)",
                      error);
  }
  free_.emplace(0, capacity_);
}

std::size_t Arena::rounded(std::size_t bytes) {
  const std::size_t page = page_bytes();
  return (std::max<std::size_t>(bytes, 1) + page - 1) / page * page;
}

std::byte* Arena::allocate(std::size_t bytes) {
  const std::size_t want = rounded(bytes);
  const std::lock_guard lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const auto [offset, length] = *it;
    free_.erase(it);
    if (length > want) free_.emplace(offset + want, length - want);
    return base_ + offset;
  }
  throw Error("dist: the shared arena has no " + std::to_string(want) + " free bytes (it holds " +
              std::to_string(capacity_) +
              ", as much as the machine's memory); free SharedBuffers "
              "no longer used");
}

void Arena::free(std::byte* block, std::size_t bytes) noexcept {
  const std::size_t length = rounded(bytes);
  const auto offset = static_cast<std::size_t>(block - base_);
  // Punching the hole gives the pages back and makes them read zero when touched again.
  ::fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
              static_cast<off_t>(length));
  const std::lock_guard lock(mu_);
  auto [it, inserted] = free_.emplace(offset, length);
  if (auto next = std::next(it); next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    if (auto prev = std::prev(it); prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
  (void)inserted;
}

std::int64_t offset_in(std::span<const std::byte> arena, const void* p, std::size_t bytes) {
  const auto* b = static_cast<const std::byte*>(p);
  if (b < arena.data() || bytes > arena.size() ||
      static_cast<std::size_t>(b - arena.data()) > arena.size() - bytes) {
    return -1;
  }
  return b - arena.data();
}

PeerArena PeerArena::map(int pid, int fd, std::size_t bytes) {
  PeerArena arena;
  const UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd || fd < 0) return arena;
  const UniqueFd copy(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), fd, 0)));
  struct stat st {};
  if (!copy || ::fstat(copy.get(), &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    return arena;
  }
  arena.base_ = map_shared(copy.get(), bytes);
  if (arena.base_ != nullptr) arena.bytes_ = bytes;
  return arena;
}

PeerArena::PeerArena(PeerArena&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PeerArena& PeerArena::operator=(PeerArena&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

PeerArena::~PeerArena() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

}  // namespace weft::dist::shm
