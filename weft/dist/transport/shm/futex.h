// Futex waits and wakes on words in shared memory (not the _PRIVATE variants, which only
// work within one process). Not public: the shm transport and its collective engine use them.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>

#include "weft/base/deadline.h"

namespace weft::dist::shm {

// Sleeps while `word` == seen, for at most `timeout` (spurious returns are fine: callers loop).
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen, Clock::duration timeout) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  timespec rel{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, seen, &rel, nullptr, 0);
}

inline void futex_wake(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
}

}  // namespace weft::dist::shm
