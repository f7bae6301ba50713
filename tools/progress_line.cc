#include "progress_line.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace weft::tools {

ProgressLine::ProgressLine() : terminal_(::isatty(STDERR_FILENO) == 1), start_(Clock::now()) {}

void ProgressLine::update(double done, double total, const std::string& what) {
  const auto now = Clock::now();
  const double share = total > 0 ? std::clamp(done / total, 0.0, 1.0) : 1.0;
  const int tenth = static_cast<int>(share * 10);
  if (terminal_) {
    // Redrawing faster than the eye reads costs the tool time; the last update always shows.
    if (drawn_ && share < 1.0 && now - last_drawn_ < std::chrono::milliseconds(100)) return;
  } else if (tenth <= last_tenth_) {
    return;
  }
  last_tenth_ = tenth;
  last_drawn_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  char eta[32] = "";
  if (share > 0 && share < 1.0)
    std::snprintf(eta, sizeof(eta), ", ETA %.0f s", seconds * (1 - share) / share);
  // \x1b[K clears what a longer earlier line left on the terminal.
  std::fprintf(stderr, "%s%s (%3.0f%%%s)%s", terminal_ ? "\r" : "", what.c_str(), 100 * share, eta,
               terminal_ ? "\x1b[K" : "\n");
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::finish() {
  if (terminal_ && drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace weft::tools
