// Which rank the others wait for. In each logging window every rank's seconds blocked in
// communication are compared: the rank the others wait for is the one that waits least. When
// one rank waits at least kGap of the window's time less than every other rank in kWindows
// windows in a row, it is named, once per rank and run.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace weft::train {

class StragglerWatch {
 public:
  static constexpr double kGap = 0.1;
  static constexpr int kWindows = 3;

  // A window of `seconds` covering steps first_step..last_step, in which rank r was blocked in
  // communication `waits[r]` seconds. Returns the report when it makes a rank the straggler
  // for the kWindows-th window in a row (the first time for that rank); else nothing.
  std::optional<std::string> observe(const std::vector<double>& waits, double seconds,
                                     std::int64_t first_step, std::int64_t last_step);

 private:
  int candidate_ = -1;
  int streak_ = 0;
  std::int64_t since_step_ = 0;
  double gap_seconds_ = 0, window_seconds_ = 0;  // over the streak
  std::set<int> reported_;
};

}  // namespace weft::train
