// Busy-wait helpers for the executors' idle loops.
#pragma once

#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace weft::internal {

// How long an idle worker polls for work before it sleeps on a condition variable. Waking a
// sleeper costs the submitter a futex system call (microseconds); polling for a while keeps
// a steady stream of small tasks off that path. Tuned with bench_executor
// (docs/PERFORMANCE.md).
inline constexpr int kIdleSpinRounds = 256;

// How long Future::get() and wait() poll before sleeping on the future's futex: a small task
// finishes sooner than a sleep and a wake-up take (the submit -> get round trip went from
// about 1 us to 0.4 us).
inline constexpr int kWaitSpinRounds = 64;

// One polling round: eight pause instructions, so that pollers re-read the shared queue
// indices less often and leave their cache lines to the submitter; every fourth round a
// yield instead, so that pollers give the core away when threads outnumber cores (2 workers
// + the submitting thread on 2 cores measured 5-30% faster than 1 pause, a yield every 16th).
inline void spin_pause(int round) {
  if (round % 4 == 3) {
    std::this_thread::yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  for (int i = 0; i < 8; ++i) _mm_pause();
#endif
}

}  // namespace weft::internal
