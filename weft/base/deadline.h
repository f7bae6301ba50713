// Time vocabulary shared by every blocking call in weft.
//
// Timeouts are given as weft::Seconds (a double-precision duration), so callers can pass
// 2s, 500ms or Seconds(0.25) alike; std::nullopt means "no timeout". A Deadline is the
// absolute steady-clock instant derived from a timeout at the moment the call started (or,
// for after_first_use, at its first wait), so a call made of several waits honours the
// caller's total budget, not each wait's.
#pragma once

#include <chrono>
#include <optional>

namespace weft {

using Seconds = std::chrono::duration<double>;
using Clock = std::chrono::steady_clock;

// `timeout` when it is a positive, finite number of seconds; otherwise InvalidArgument saying
// `what` it was given for (a NaN or a negative timeout would make every wait fail at once, or
// never).
Seconds checked_timeout(Seconds timeout, const char* what);

// Clock::now() as of the kernel's last tick: up to a tick (1-4 ms) behind, for about 5 ns
// against Clock::now()'s 25 on the VM weft is measured on (CLOCK_MONOTONIC_COARSE, the same
// clock as steady_clock's on Linux).
Clock::time_point coarse_now() noexcept;

class Deadline {
 public:
  // A deadline that never passes.
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  // `timeout` from now (negative counts as zero), or never() for std::nullopt.
  static Deadline after(std::optional<Seconds> timeout);
  // `timeout` from the moment this deadline is first asked anything or copied, whichever
  // comes first. A call that completes without waiting (a collective whose peers are already
  // there) then never reads the clock, which costs about 25 ns on the VM weft is measured on.
  // Pass it by reference to keep it unstarted; every copy starts it first, so copies share
  // one budget (a move carries it over unstarted). Starting writes to it, even through a
  // const reference: an unstarted deadline belongs to one thread until it is copied.
  static Deadline after_first_use(std::optional<Seconds> timeout);

  Deadline(const Deadline& other) noexcept : when_(other.when()) {}
  Deadline(Deadline&& other) noexcept : when_(other.when_), pending_(other.pending_) {}
  Deadline& operator=(const Deadline& other) noexcept;
  Deadline& operator=(Deadline&& other) noexcept;

  bool is_never() const { return when() == Clock::time_point::max(); }
  bool expired() const { return !is_never() && Clock::now() >= when(); }
  Clock::time_point when() const noexcept {
    if (pending_) start();
    return when_;
  }
  // Time left, at least zero; Clock::duration::max() for never().
  Clock::duration remaining() const;
  // remaining() without starting the deadline: for one not started yet, its whole timeout,
  // and no clock read (a watchdog that looks every half second dates it from coarse_now()).
  Clock::duration budget() const;

 private:
  explicit Deadline(Clock::time_point when, std::optional<Seconds> pending = std::nullopt)
      : when_(when), pending_(pending) {}
  void start() const noexcept;

  mutable Clock::time_point when_;
  mutable std::optional<Seconds> pending_;  // the timeout of a deadline not started yet
};

}  // namespace weft
