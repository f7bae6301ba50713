// Time vocabulary shared by every blocking call in weft.
//
// Timeouts are given as weft::Seconds (a double-precision duration), so callers can pass
// 2s, 500ms or Seconds(0.25) alike; std::nullopt means "no timeout". A Deadline is the
// absolute steady-clock instant derived from a timeout at the moment the call started,
// so a call made of several waits honours the caller's total budget, not each wait's.
#pragma once

#include <chrono>
#include <optional>

namespace weft {

using Seconds = std::chrono::duration<double>;
using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  // A deadline that never passes.
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  // `timeout` from now (negative counts as zero), or never() for std::nullopt.
  static Deadline after(std::optional<Seconds> timeout);

  bool is_never() const { return when_ == Clock::time_point::max(); }
  bool expired() const { return !is_never() && Clock::now() >= when_; }
  Clock::time_point when() const { return when_; }
  // Time left, at least zero; Clock::duration::max() for never().
  Clock::duration remaining() const;

 private:
  explicit Deadline(Clock::time_point when) : when_(when) {}
  Clock::time_point when_;
};

}  // namespace weft
