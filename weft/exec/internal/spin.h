// Busy-wait helpers for the executors' idle loops.
#pragma once

#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace weft::internal {

// How long an idle worker polls for work before it sleeps on a condition variable. Waking a
// sleeper costs a futex system call (a few microseconds); polling this long (tens of
// microseconds) keeps a steady stream of small tasks off that path. Measured in
// docs/PERFORMANCE.md (bench_executor).
inline constexpr int kIdleSpinRounds = 256;

// One polling round: a pause instruction, and every 16th round a yield, so that polling
// threads give the core away when there are more threads than cores.
inline void spin_pause(int round) {
  if (round % 16 == 15) {
    std::this_thread::yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace weft::internal
