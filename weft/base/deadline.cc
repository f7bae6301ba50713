#include "weft/base/deadline.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "weft/base/error.h"

namespace weft {

Seconds checked_timeout(Seconds timeout, const char* what) {
  if (timeout.count() > 0 && std::isfinite(timeout.count())) return timeout;
  throw InvalidArgument(std::string(what) + ": a timeout is a positive, finite number of " +
                        "seconds; got " + std::to_string(timeout.count()));
}

Deadline Deadline::after(std::optional<Seconds> timeout) {
  if (!timeout) return never();
  const auto now = Clock::now();
  const Seconds left = std::max(*timeout, Seconds::zero());
  // Saturate instead of overflowing for huge timeouts (e.g. Seconds(1e300)).
  const Seconds room = std::chrono::duration_cast<Seconds>(Clock::time_point::max() - now);
  if (left >= room) return never();
  return Deadline(now + std::chrono::duration_cast<Clock::duration>(left));
}

Deadline Deadline::after_first_use(std::optional<Seconds> timeout) {
  if (!timeout) return never();
  return Deadline(Clock::time_point::max(), timeout);
}

Deadline& Deadline::operator=(const Deadline& other) noexcept {
  when_ = other.when();
  pending_.reset();
  return *this;
}

Deadline& Deadline::operator=(Deadline&& other) noexcept {
  when_ = other.when_;
  pending_ = other.pending_;
  return *this;
}

void Deadline::start() const noexcept {
  when_ = after(pending_).when_;
  pending_.reset();
}

Clock::duration Deadline::remaining() const {
  if (is_never()) return Clock::duration::max();
  return std::max(when() - Clock::now(), Clock::duration::zero());
}

Clock::duration Deadline::budget() const {
  if (!pending_) return remaining();
  if (*pending_ >= std::chrono::duration_cast<Seconds>(Clock::duration::max())) {
    return Clock::duration::max();
  }
  return std::max(std::chrono::duration_cast<Clock::duration>(*pending_), Clock::duration::zero());
}

Clock::time_point coarse_now() noexcept {
  static_assert(std::is_same_v<Clock, std::chrono::steady_clock>);
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return Clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

}  // namespace weft
