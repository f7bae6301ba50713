#include "weft/dist/mpi/mpi_watchdog.h"

#include <mpi.h>

#include <cstdio>

namespace weft::dist {
namespace {

constexpr auto kPeriod = std::chrono::milliseconds(500);

}  // namespace

MpiWatchdog::MpiWatchdog() : thread_([this] { run(); }) {}

MpiWatchdog::~MpiWatchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

MpiWatchdog::Guard::Guard(MpiWatchdog& dog, const Deadline& deadline, const char* what) {
  // Dated from the coarse clock and without starting the deadline: the call itself then reads
  // no clock (two reads were 50 ns of a 4-byte all-reduce's 0.45 µs), and the watchdog looks
  // only every half second.
  const Clock::duration budget = deadline.budget();
  if (budget == Clock::duration::max()) return;
  const Clock::time_point now = coarse_now();
  const Clock::rep when = budget >= Clock::time_point::max() - now
                              ? Clock::time_point::max().time_since_epoch().count()
                              : (now + budget).time_since_epoch().count();
  for (;;) {  // the first free slot; with one call per thread at a time, one is nearly always
    for (Slot& slot : dog.slots_) {
      bool free = false;
      if (slot.taken.load(std::memory_order_relaxed) ||
          !slot.taken.compare_exchange_strong(free, true, std::memory_order_acquire)) {
        continue;
      }
      slot.what.store(what, std::memory_order_relaxed);
      slot.timeout_seconds.store(std::chrono::duration_cast<Seconds>(budget).count(),
                                 std::memory_order_relaxed);
      slot.deadline.store(when, std::memory_order_release);
      slot_ = &slot;
      return;
    }
    std::this_thread::yield();
  }
}

MpiWatchdog::Guard::~Guard() {
  if (slot_ == nullptr) return;
  slot_->deadline.store(Slot::kFree, std::memory_order_relaxed);
  slot_->taken.store(false, std::memory_order_release);
}

void MpiWatchdog::run() {
  std::unique_lock lock(mu_);
  while (!wake_.wait_for(lock, kPeriod, [this] { return stop_; })) {
    const Clock::rep now = Clock::now().time_since_epoch().count();
    for (const Slot& slot : slots_) {
      const Clock::rep deadline = slot.deadline.load(std::memory_order_acquire);
      if (deadline == Slot::kFree || now < deadline) continue;
      std::fprintf(stderr,
                   "weft: mpi backend: %s did not complete within its operation's timeout "
                   "(%.0f s): a rank did not make the same call, or is stuck or gone. MPI "
                   "cannot cancel a collective, so this rank ends the job (MPI_Abort). Check "
                   "that every rank makes the same calls in the same order, or raise the "
                   "timeout.\n",
                   slot.what.load(std::memory_order_relaxed),
                   slot.timeout_seconds.load(std::memory_order_relaxed));
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
}

}  // namespace weft::dist
