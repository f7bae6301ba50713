#include "weft/train/straggler.h"

#include <algorithm>
#include <cstdio>

namespace weft::train {

std::optional<std::string> StragglerWatch::observe(const std::vector<double>& waits, double seconds,
                                                   std::int64_t first_step,
                                                   std::int64_t last_step) {
  if (waits.size() < 2 || seconds <= 0) return std::nullopt;
  const auto least = std::min_element(waits.begin(), waits.end());
  const int rank = static_cast<int>(least - waits.begin());
  double others = -1;  // the least any other rank waited
  for (std::size_t r = 0; r < waits.size(); ++r) {
    if (static_cast<int>(r) != rank && (others < 0 || waits[r] < others)) others = waits[r];
  }
  const double gap = others - *least;
  if (gap < kGap * seconds) {
    streak_ = 0;
    return std::nullopt;
  }
  if (streak_ == 0 || rank != candidate_) {
    candidate_ = rank;
    streak_ = 0;
    since_step_ = first_step;
    gap_seconds_ = window_seconds_ = 0;
  }
  ++streak_;
  gap_seconds_ += gap;
  window_seconds_ += seconds;
  if (streak_ < kWindows || !reported_.insert(rank).second) return std::nullopt;
  char line[400];
  std::snprintf(line, sizeof line,
                "rank %d is slow: in steps %lld-%lld every other rank waited at least %.2f s "
                "(%.0f%% of the steps' time) longer in communication than rank %d did, so the "
                "others wait for it; look at what else runs on its cores, its CPU binding "
                "(weftrun --bind-to core) and its host",
                rank, static_cast<long long>(since_step_), static_cast<long long>(last_step),
                gap_seconds_, 100 * gap_seconds_ / window_seconds_, rank);
  return std::string(line);
}

}  // namespace weft::train
