// What the flight recorders of a job's ranks say about why it stopped: which rank is behind
// or diverged, in which collective of which group, at which site, and what the others were
// doing. weftrun prints it when a job fails; tests read it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "weft/recorder/ring_reader.h"

namespace weft::recorder {

struct RankView {
  int rank = 0;
  std::optional<RingSnapshot> ring;  // empty: no ring to read (the process never recorded)
  std::string status;                // "exited with code 1", "stopped", ... (weftrun's words)
};

// One line per finding, the verdict first: ranks that called different collectives at the
// same sequence number (diverged), else ranks behind the others on a group (named with their
// last collective there and their status, the others with the one they wait in and for how
// long), else, when an operation did not complete, that every rank's collectives match; then
// each rank's last point-to-point operation if it did not complete. `now_ns` is the coarse
// monotonic clock's reading (CLOCK_MONOTONIC_COARSE) when the rings were read. Nothing when
// no rank has a ring.
std::vector<std::string> diagnose(const std::vector<RankView>& ranks, std::int64_t now_ns);

}  // namespace weft::recorder
