#include "weft/base/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <climits>

namespace weft {
namespace {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

std::uint32_t* address(const std::atomic<std::uint32_t>& word) {
  return reinterpret_cast<std::uint32_t*>(const_cast<std::atomic<std::uint32_t>*>(&word));
}

}  // namespace

void futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected, Deadline deadline,
                FutexScope scope) {
  timespec abs{};
  timespec* timeout = nullptr;
  if (!deadline.is_never()) {
    // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time: steady_clock's clock.
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.when().time_since_epoch())
            .count();
    abs.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    abs.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    timeout = &abs;
  }
  const int op = scope == FutexScope::kPrivate ? FUTEX_WAIT_BITSET_PRIVATE : FUTEX_WAIT_BITSET;
  ::syscall(SYS_futex, address(word), op, expected, timeout, nullptr, FUTEX_BITSET_MATCH_ANY);
}

void futex_wake_all(const std::atomic<std::uint32_t>& word, FutexScope scope) {
  const int op = scope == FutexScope::kPrivate ? FUTEX_WAKE_PRIVATE : FUTEX_WAKE;
  ::syscall(SYS_futex, address(word), op, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace weft
