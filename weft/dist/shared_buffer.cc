#include "weft/dist/shared_buffer.h"

#include <unistd.h>

#include <utility>

#include "weft/dist/shm/arena.h"

namespace weft::dist {

SharedBuffer::SharedBuffer(std::size_t bytes)
    : data_(shm::Arena::instance().allocate(bytes)), bytes_(bytes), pid_(::getpid()) {}

SharedBuffer::~SharedBuffer() {
  if (data_ != nullptr && pid_ == ::getpid()) shm::Arena::instance().free(data_, bytes_);
}

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      pid_(other.pid_) {}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& other) noexcept {
  if (this != &other) {
    SharedBuffer old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    pid_ = other.pid_;
  }
  return *this;
}

}  // namespace weft::dist
