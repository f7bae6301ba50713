// Turns the signals the launcher handles into bytes on a pipe, so that one poll loop
// waits for signals, worker exits (SIGCHLD) and worker output together.
#pragma once

#include <signal.h>

#include <vector>

#include "weft/base/unique_fd.h"

namespace weft::launch::internal {

// While alive: SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGCHLD are caught and queued, SIGPIPE
// is ignored.
// The destructor restores the previous dispositions. At most one per process (the
// handler writes to a process-wide descriptor); not thread-safe.
class SignalPipe {
 public:
  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // Readable when a signal has arrived; for poll().
  int fd() const { return read_.get(); }
  // The signals received since the last call, oldest first (SIGCHLD included, possibly
  // coalesced). Never blocks.
  std::vector<int> take();

  // The signals that the launcher catches: children must get their defaults back.
  static constexpr int kHandled[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE};

 private:
  UniqueFd read_;
  UniqueFd write_;
  struct sigaction previous_[sizeof(kHandled) / sizeof(kHandled[0])];
};

}  // namespace weft::launch::internal
