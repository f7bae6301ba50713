// MpiWatchdog: ends the job when a blocking MPI call outlives its operation's deadline. MPI
// cannot time out or cancel a collective, and a rank must not wait forever for a peer that
// never calls it (or died without the launcher noticing), so one thread per process looks at
// the deadlines of the calls in progress every half second and, when one has passed, prints
// which call it was and calls MPI_Abort, which ends every rank of the job (as mpirun does
// when any rank fails).
//
// Registering a call is a few atomic stores into a free slot of a fixed table: no lock, no
// allocation and no system call per collective.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "weft/base/deadline.h"

namespace weft::dist {

class MpiWatchdog {
 public:
  // Calls in progress at once in one process (groups x threads); a call beyond that waits
  // for a free slot.
  static constexpr std::size_t kSlots = 256;

  MpiWatchdog();
  ~MpiWatchdog();
  MpiWatchdog(const MpiWatchdog&) = delete;
  MpiWatchdog& operator=(const MpiWatchdog&) = delete;

  // One call in progress: its deadline (steady-clock ticks; kFree when the slot is unused),
  // what it is, and its timeout for the message.
  struct Slot {
    static constexpr Clock::rep kFree = -1;
    std::atomic<Clock::rep> deadline{kFree};
    std::atomic<const char*> what{nullptr};
    std::atomic<double> timeout_seconds{0};
    std::atomic<bool> taken{false};
  };

  // Watches one call for as long as it lives; a deadline that never passes costs nothing.
  class Guard {
   public:
    Guard(MpiWatchdog& dog, const Deadline& deadline, const char* what);
    ~Guard();
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    Slot* slot_ = nullptr;
  };

 private:
  void run();

  std::array<Slot, kSlots> slots_;
  std::mutex mu_;  // for stop_ and the wait between looks only
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the fields it reads
};

}  // namespace weft::dist
