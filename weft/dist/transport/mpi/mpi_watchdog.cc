#include "weft/dist/transport/mpi/mpi_watchdog.h"

#include <mpi.h>

#include <algorithm>
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
  if (deadline.is_never()) return;
  const Clock::time_point when = deadline.when();
  std::lock_guard lock(dog.mu_);
  at_ = dog.calls_.emplace(when, Call{what, deadline.remaining()});
  dog_ = &dog;
  // No wake-up: the watchdog looks at least every kPeriod, so a call is ended at most that
  // late, and a collective costs no system call here.
}

MpiWatchdog::Guard::~Guard() {
  if (dog_ == nullptr) return;
  std::lock_guard lock(dog_->mu_);
  dog_->calls_.erase(at_);
}

void MpiWatchdog::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    const Clock::time_point now = Clock::now();
    if (calls_.empty() || now < calls_.begin()->first) {
      const Clock::time_point next = now + kPeriod;
      wake_.wait_until(lock, calls_.empty() ? next : std::min(next, calls_.begin()->first));
      continue;
    }
    const Call& call = calls_.begin()->second;
    std::fprintf(stderr,
                 "weft: mpi backend: %s did not complete within its operation's timeout "
                 "(%.0f s): a rank did not make the same call, or is stuck or gone. MPI cannot "
                 "cancel a collective, so this rank ends the job (MPI_Abort). Check that every "
                 "rank makes the same calls in the same order, or raise the timeout.\n",
                 call.what, call.timeout.count());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

}  // namespace weft::dist
