// MpiWatchdog: ends the job when a blocking MPI call outlives its operation's deadline. MPI
// cannot time out or cancel a collective, and a rank must not wait forever for a peer that
// never calls it (or died without the launcher noticing), so one thread per process sleeps
// until the earliest deadline of the calls in progress and, if that call has not returned by
// then, prints what it was and calls MPI_Abort, which ends every rank of the job (as mpirun
// does when any rank fails).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "weft/base/deadline.h"

namespace weft::dist {

class MpiWatchdog {
 public:
  MpiWatchdog();
  ~MpiWatchdog();
  MpiWatchdog(const MpiWatchdog&) = delete;
  MpiWatchdog& operator=(const MpiWatchdog&) = delete;

  struct Call {
    const char* what;
    Seconds timeout;
  };

  // Watches one call for as long as it lives; a deadline that never passes costs nothing.
  class Guard {
   public:
    Guard(MpiWatchdog& dog, const Deadline& deadline, const char* what);
    ~Guard();
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    MpiWatchdog* dog_ = nullptr;
    std::multimap<Clock::time_point, Call>::iterator at_;
  };

 private:
  void run();

  std::mutex mu_;
  std::condition_variable wake_;
  std::multimap<Clock::time_point, Call> calls_;  // by deadline; guarded by mu_
  bool stop_ = false;                             // guarded by mu_
  std::thread thread_;                            // last: starts after the fields it reads
};

}  // namespace weft::dist
