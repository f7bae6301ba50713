#include "weft/dist/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <utility>

#include "weft/base/error.h"
#include "weft/base/unique_fd.h"

namespace weft::dist::shm {
namespace {

std::string random_name() {
  unsigned char bytes[16];
  if (::getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    throw SystemError("shm: getrandom", errno);
  }
  std::string name = "/weft-";
  char hex[3];
  for (unsigned char b : bytes) {
    std::snprintf(hex, sizeof(hex), "%02x", b);
    name += hex;
  }
  return name;
}

void* map(int fd, std::size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw SystemError("shm: mmap " + name, errno);
  return p;
}

}  // namespace

Segment Segment::create(std::size_t bytes) {
  Segment s;
  s.name_ = random_name();
  // The mapping outlives the descriptor: it is closed on return, mapped or not.
  const UniqueFd fd(::shm_open(s.name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) throw SystemError("shm: shm_open " + s.name_, errno);
  s.owner_ = true;  // from here on, a throw unlinks the name (the destructor)
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    throw SystemError("shm: sizing " + s.name_ + " (is /dev/shm full?)", errno);
  }
  s.data_ = map(fd.get(), bytes, s.name_);
  s.size_ = bytes;
  return s;
}

Segment Segment::open(const std::string& name, std::size_t bytes) {
  if (name.rfind("/weft-", 0) != 0 || name.size() > 64) {
    throw Error("shm: '" + name + "' is not a weft segment name");
  }
  const UniqueFd fd(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd) throw SystemError("shm: shm_open " + name, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    throw Error("shm: segment " + name +
                " has the wrong size; the ranks run different builds "
                "or options");
  }
  Segment s;
  s.name_ = name;
  s.data_ = map(fd.get(), bytes, name);
  s.size_ = bytes;
  return s;
}

Segment::~Segment() {
  if (owner_) unlink();
  if (data_ != nullptr) ::munmap(data_, size_);
}

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    if (owner_) unlink();
    if (data_ != nullptr) ::munmap(data_, size_);
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owner_ = std::exchange(other.owner_, false);
  }
  return *this;
}

void Segment::unlink() {
  if (owner_ && !name_.empty()) ::shm_unlink(name_.c_str());
  owner_ = false;
}

}  // namespace weft::dist::shm
