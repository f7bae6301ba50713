// A POSIX shared-memory segment: created private to its user (mode 0600, an unguessable
// name, O_EXCL), mapped, and unlinked as soon as every rank has mapped it, so that nothing
// is left in /dev/shm even if the job is killed later. Not public.
#pragma once

#include <cstddef>
#include <string>

namespace weft::dist::shm {

class Segment {
 public:
  // Creates and maps a new segment of `bytes` (zero-filled) under a fresh random name.
  static Segment create(std::size_t bytes);
  // Maps an existing segment by name; its size must be `bytes` (checked with fstat).
  static Segment open(const std::string& name, std::size_t bytes);

  Segment() = default;
  ~Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const std::string& name() const { return name_; }
  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  // Removes the name; the mapping stays valid. Idempotent.
  void unlink();

 private:
  std::string name_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  bool owner_ = false;  // created here: unlink on destruction if still named
};

}  // namespace weft::dist::shm
