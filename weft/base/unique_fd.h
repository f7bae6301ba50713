// weft::UniqueFd: the one owner of a file descriptor, which it closes exactly once.
//
// Ownership: a UniqueFd holding a descriptor (>= 0) owns it; nobody else may close it. It is
// closed by the destructor, by reset() or by close(), whichever comes first; release() hands
// it back to the caller unclosed. Move-only: a moved-from UniqueFd is empty (get() == -1).
//
// Errors: the destructor and reset() ignore what close(2) reports. On Linux the descriptor
// is released even when close fails (so it must never be retried, not even on EINTR), and
// for pipes, sockets and read-only files the error carries no news. Where it does, for a
// file whose written data must be on disk (a checkpoint), fsync first, then call close()
// and check the errno it returns: some file systems (NFS) report write-back errors only there.
//
// Thread-safety: none, like the int it wraps. Blocking: close may wait for a file system
// that flushes on close; it never waits for another process.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace weft {

class UniqueFd {
 public:
  UniqueFd() = default;
  // Takes ownership of `fd`; a negative `fd` (a failed open) makes an empty UniqueFd, so that
  // `UniqueFd fd(::open(...)); if (!fd) throw ...` reads errno as open left it.
  explicit UniqueFd(int fd) noexcept : fd_(fd < 0 ? -1 : fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  // The descriptor, still owned by this object; -1 when empty.
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }

  // Closes the descriptor held (ignoring close's result) and takes ownership of `fd`
  // instead. Precondition: `fd` is not the descriptor held now.
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd < 0 ? -1 : fd;
  }

  // Gives the descriptor up without closing it: the caller owns it now. Leaves this empty.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

  // Closes the descriptor now and returns 0, or close's errno (the descriptor is released
  // either way). Leaves this empty; closing an empty UniqueFd returns 0.
  [[nodiscard]] int close() noexcept {
    if (fd_ < 0) return 0;
    return ::close(std::exchange(fd_, -1)) == 0 ? 0 : errno;
  }

 private:
  int fd_ = -1;
};

}  // namespace weft
