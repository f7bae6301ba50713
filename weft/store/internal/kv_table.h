// The key-value semantics every store shares (add's integer parsing, compare_set's rules),
// on a plain map, plus the helpers that word timeout messages the same way everywhere.
// Not thread-safe: HashStore and the TCPStore server lock around it, FileStore replays its
// file into one. Not public.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "weft/base/deadline.h"

namespace weft::store::internal {

// Most bytes one record may hold: a FileStore record's key + value, a TCPStore frame's
// payload (docs/STORES.md). Readers check lengths against it before allocating.
inline constexpr std::size_t kMaxRecordBytes = std::size_t{64} << 20;

class KvTable {
 public:
  void set(const std::string& key, std::string value) { map_[key] = std::move(value); }
  // The value of `key`, or null; valid until the table is next modified.
  const std::string* find(const std::string& key) const;
  // Throws weft::InvalidArgument if the value is not a decimal int64 or the sum overflows.
  std::int64_t add(const std::string& key, std::int64_t delta);
  // torch's rules: absent + empty `expected` sets; present + equal sets; the result is the
  // value afterwards, except that an absent key with a non-empty `expected` returns
  // `expected` (and stays absent).
  std::string compare_set(const std::string& key, const std::string& expected, std::string desired);
  bool erase(const std::string& key) { return map_.erase(key) > 0; }
  std::int64_t size() const { return static_cast<std::int64_t>(map_.size()); }
  // The keys of `keys` that are absent, in order.
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;

 private:
  std::unordered_map<std::string, std::string> map_;
};

// The integer an add() stores, parsed back; throws weft::InvalidArgument naming `key`.
std::int64_t parse_counter(const std::string& key, const std::string& value);

// "'a', 'b' (2 of 3 keys)" style list for messages; long lists are elided.
std::string describe_keys(const std::vector<std::string>& keys, std::size_t total);

// The TimeoutError message of a get/wait that gave up: which store, which keys, what to do.
std::string timeout_message(const std::string& what, const std::vector<std::string>& missing,
                            std::size_t total, Seconds timeout);

// Throws weft::InvalidArgument when a request of `bytes` exceeds kMaxRecordBytes.
void check_size(const std::string& what, std::size_t bytes);

// Waits on `cv` until `ready()` or `deadline`, in bounded slices so that a far deadline
// never reaches the clock arithmetic; returns ready().
template <class Pred>
bool wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Deadline deadline,
                Pred ready) {
  constexpr Clock::duration kSlice = std::chrono::hours(1);
  while (!ready()) {
    if (deadline.expired()) return false;
    cv.wait_for(lock, std::min(deadline.remaining(), kSlice));
  }
  return true;
}

}  // namespace weft::store::internal
