#include "weft/launch/internal/exit_status.h"

#include <cstring>

namespace weft::launch::internal {

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string ExitStatus::describe() const {
  if (signal == 0) return "exited with code " + std::to_string(code);
  return "was killed by signal " + std::to_string(signal) + " (" + signal_name(signal) + ": " +
         ::strsignal(signal) + ")";
}

}  // namespace weft::launch::internal
