// Linux futex wait/wake on a 32-bit atomic, with an absolute steady-clock deadline. Used by
// future states, so that a finished task wakes its waiters with one atomic exchange and, only
// when someone sleeps, one system call (a mutex + condition variable pair per future costs
// 90 bytes and a lock round trip on every completion). Not public.
#pragma once

#include <atomic>
#include <cstdint>

#include "weft/base/deadline.h"

namespace weft::internal {

// Sleeps while `word` holds `expected`, until woken or `deadline`; may return spuriously.
void futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected, Deadline deadline);
void futex_wake_all(const std::atomic<std::uint32_t>& word);

}  // namespace weft::internal
