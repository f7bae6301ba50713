// How a worker ended, and how weftrun words and reports it.
#pragma once

#include <string>

namespace weft::launch::internal {

struct ExitStatus {
  int code = 0;    // the exit code, when signal == 0
  int signal = 0;  // the signal that killed it, or 0

  bool ok() const { return signal == 0 && code == 0; }
  // The code a shell would report: the exit code, or 128 + the signal.
  int shell_code() const { return signal != 0 ? 128 + signal : code; }
  // "exited with code 3", or "was killed by signal 11 (SIGSEGV: Segmentation fault)".
  std::string describe() const;
};

// "SIGTERM" for SIGTERM; "signal 42" for a number without a name.
std::string signal_name(int sig);

}  // namespace weft::launch::internal
