#include "weft/exec/internal/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <climits>

namespace weft::internal {
namespace {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

std::uint32_t* address(const std::atomic<std::uint32_t>& word) {
  return reinterpret_cast<std::uint32_t*>(const_cast<std::atomic<std::uint32_t>*>(&word));
}

}  // namespace

void futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
                Deadline deadline) {
  timespec abs{};
  timespec* timeout = nullptr;
  if (!deadline.is_never()) {
    // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time: steady_clock's clock.
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        deadline.when().time_since_epoch())
                        .count();
    abs.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    abs.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    timeout = &abs;
  }
  // EAGAIN (the word changed), EINTR and ETIMEDOUT all send the caller back to re-check.
  ::syscall(SYS_futex, address(word), FUTEX_WAIT_BITSET_PRIVATE, expected, timeout, nullptr,
            FUTEX_BITSET_MATCH_ANY);
}

void futex_wake_all(const std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, address(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace weft::internal
