// A long tool's progress on stderr: on a terminal one line redrawn in place (at most ten times
// a second), elsewhere (a log file, a pipe) a plain line at each tenth of the work, so that no
// control code lands in a file. Shared by weft-data tokenize and weft-ckpt consolidate.
#pragma once

#include <chrono>
#include <string>

namespace weft::tools {

class ProgressLine {
 public:
  ProgressLine();
  // `done` of `total` units (bytes), `what` the line's text without the share and speed:
  // "tokenized 1.2 of 5.0 MB, 12 documents". The line adds the share done and the ETA.
  void update(double done, double total, const std::string& what);
  // Ends a redrawn line, so that what follows starts on a line of its own.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  bool terminal_;
  Clock::time_point start_, last_drawn_;
  int last_tenth_ = -1;
  bool drawn_ = false;
};

}  // namespace weft::tools
