#include "python/src/interrupt.h"

#include <fcntl.h>
#include <pybind11/pybind11.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <thread>
#include <vector>

#include "weft/base/error.h"

namespace weft::python {
namespace {

struct State {
  int pipe_read = -1;
  int pipe_write = -1;
  pid_t owner = 0;  // the process that armed the handler: a forked child's SIGINT is its own
  struct sigaction previous {};
  std::mutex mu;                             // guards `blocked` against the watcher
  std::vector<dist::ProcessGroup*> blocked;  // the groups calls are blocked in, one per call
};

State& state() {
  static State* s = new State();  // never destroyed: the watcher thread outlives main()
  return *s;
}

// Async-signal-safe: a write, then Python's handler (which notes the signal for the
// interpreter).
void on_sigint(int signo, siginfo_t* info, void* context) {
  const int saved = errno;
  if (::getpid() == state().owner) {
    const char byte = 1;
    [[maybe_unused]] const ssize_t n = ::write(state().pipe_write, &byte, 1);  // non-blocking
  }
  const struct sigaction& previous = state().previous;
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction != nullptr) previous.sa_sigaction(signo, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN &&
             previous.sa_handler != nullptr) {
    previous.sa_handler(signo);
  }
  errno = saved;
}

void watch() {
  State& s = state();
  char byte;
  for (;;) {
    const ssize_t n = ::read(s.pipe_read, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::lock_guard lock(s.mu);
    for (dist::ProcessGroup* group : s.blocked) {
      group->abort("interrupted by SIGINT (Ctrl-C) in a blocking call from Python");
    }
  }
}

}  // namespace

void arm_interrupts() {
  State& s = state();
  static std::once_flag started;
  std::call_once(started, [&s] {
    int fds[2];
    if (::pipe(fds) != 0) throw SystemError("weft: pipe for Ctrl-C", errno);
    ::fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    ::fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    ::fcntl(fds[1], F_SETFL, O_NONBLOCK);  // a full pipe drops the byte, never blocks
    s.pipe_read = fds[0];
    s.pipe_write = fds[1];
    s.owner = ::getpid();
    std::thread(watch).detach();
  });
  struct sigaction current {};
  ::sigaction(SIGINT, nullptr, &current);
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_sigint) return;
  // Ignored, or left to the default (the process dies): Ctrl-C already does what the
  // program chose, and must not turn into an abort.
  if (!(current.sa_flags & SA_SIGINFO) &&
      (current.sa_handler == SIG_IGN || current.sa_handler == SIG_DFL)) {
    return;
  }
  struct sigaction ours {};
  ours.sa_sigaction = on_sigint;
  ours.sa_flags = SA_SIGINFO | SA_ONSTACK;  // no SA_RESTART, as Python's
  sigemptyset(&ours.sa_mask);
  ::sigaction(SIGINT, &ours, &s.previous);
}

BlockingCall::BlockingCall(dist::ProcessGroup* group) : group_(group) {
  std::lock_guard lock(state().mu);
  state().blocked.push_back(group);
}

BlockingCall::~BlockingCall() {
  std::lock_guard lock(state().mu);
  std::vector<dist::ProcessGroup*>& blocked = state().blocked;
  blocked.erase(std::find(blocked.begin(), blocked.end(), group_));
}

void raise_if_interrupted() {
  if (PyErr_CheckSignals() != 0) throw pybind11::error_already_set();
}

}  // namespace weft::python
