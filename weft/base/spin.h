// Pause loops: what a thread does between two looks at a word that another thread or process
// is about to change, while the wait is expected to be shorter than sleeping and being woken
// (a futex or condition variable round trip costs microseconds). Thread-safe; never blocks.
#pragma once

#include <thread>

namespace weft {

// One spin-loop hint to the CPU (x86 `pause`, Arm `yield`): the core saves power, leaves the
// pipeline to its sibling hyperthread and does not mis-speculate the loop's exit when the
// word changes. How long it takes depends on the CPU (tens to over a hundred cycles on x86);
// a no-op on other architectures.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// Round `round` (0, 1, 2, ...) of a polling loop: eight pauses, so that pollers re-read the
// shared word less often and leave its cache line to the writer; every fourth round a yield
// instead, so that pollers give the core away when threads outnumber cores (measured for
// the thread pool: 2 workers + the submitting thread on 2 cores ran 5-30% faster than with 1
// pause a round and a yield every 16th; docs/PERFORMANCE_LOG.md).
inline void spin_pause(int round) {
  if (round % 4 == 3) {
    std::this_thread::yield();
    return;
  }
  for (int i = 0; i < 8; ++i) cpu_relax();
}

}  // namespace weft
