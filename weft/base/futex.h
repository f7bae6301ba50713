// Linux futex waits and wakes on a 32-bit atomic word: how weft sleeps on a word that
// another thread (kPrivate) or another process mapping the same memory (kShared) changes.
//
// A waiter loops: load the word, decide it must wait, announce itself where the waker will
// look (a sleepers bit, a waiter count), then futex_wait with the value it loaded. The
// kernel re-checks the word before sleeping, so a wake that comes between the load and the
// sleep is not lost. The waker changes the word first, then calls futex_wake_all only if
// someone announced itself, which keeps the system call off the fast path.
//
// Both calls are thread-safe and never throw; errors (EAGAIN: the word changed; EINTR;
// ETIMEDOUT) all mean "re-check the word", which the caller's loop does anyway.
#pragma once

#include <atomic>
#include <cstdint>

#include "weft/base/deadline.h"

namespace weft {

// Who may wake the waiter. kPrivate: threads of this process (cheaper: the kernel keys the
// wait on the virtual address). kShared: any process that maps the word, as in POSIX shared
// memory. A wake need not reach a waiter of the other scope: both sides of a word use one.
enum class FutexScope { kPrivate, kShared };

// Sleeps while `word` holds `expected`, until woken or `deadline` passes (Deadline::never()
// waits without a limit). Returns at once if the word differs; may also return spuriously,
// so the caller re-checks the word and its deadline in a loop.
void futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected, Deadline deadline,
                FutexScope scope);

// Wakes every thread sleeping in futex_wait on `word` with the same scope. Never blocks.
void futex_wake_all(const std::atomic<std::uint32_t>& word, FutexScope scope);

}  // namespace weft
