#include "weft/launch/internal/signal_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <iterator>

#include "weft/base/check.h"
#include "weft/base/error.h"

namespace weft::launch::internal {
namespace {

// The handler's only state; -1 when no SignalPipe is alive.
volatile sig_atomic_t g_write_fd = -1;

void on_signal(int sig) {
  const int saved = errno;
  const int fd = g_write_fd;
  const unsigned char byte = static_cast<unsigned char>(sig);
  // Non-blocking: a full pipe already guarantees a wake-up, so a lost byte is harmless
  // for SIGCHLD; INT/TERM cannot fill 64 KiB before the loop drains it.
  if (fd >= 0) {
    [[maybe_unused]] const ssize_t n = ::write(fd, &byte, 1);
  }
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe() {
  WEFT_CHECK(g_write_fd == -1);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw SystemError("pipe2 for signal handling", errno);
  read_.reset(fds[0]);
  write_.reset(fds[1]);
  g_write_fd = fds[1];
  for (std::size_t i = 0; i < std::size(kHandled); ++i) {
    struct sigaction action = {};
    action.sa_handler = kHandled[i] == SIGPIPE ? SIG_IGN : on_signal;
    sigemptyset(&action.sa_mask);
    // SA_RESTART keeps plain reads and writes from failing with EINTR; poll() still wakes.
    action.sa_flags = SA_RESTART | (kHandled[i] == SIGCHLD ? SA_NOCLDSTOP : 0);
    ::sigaction(kHandled[i], &action, &previous_[i]);
  }
}

SignalPipe::~SignalPipe() {
  for (std::size_t i = 0; i < std::size(kHandled); ++i) {
    ::sigaction(kHandled[i], &previous_[i], nullptr);
  }
  g_write_fd = -1;
}

std::vector<int> SignalPipe::take() {
  std::vector<int> signals;
  unsigned char buffer[64];
  for (;;) {
    const ssize_t n = ::read(read_.get(), buffer, sizeof(buffer));
    if (n <= 0) break;  // EAGAIN: drained
    signals.insert(signals.end(), buffer, buffer + n);
  }
  return signals;
}

}  // namespace weft::launch::internal
