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
  std::optional<RingSnapshot> ring;  // empty: no ring to read
  std::string status;                // "exited with code 1", ... (weftrun's words)
  bool stopped = false;              // found stopped (SIGSTOP, a debugger) when the job ended
  std::int64_t read_ns = 0;          // when the ring was read, on its clock (coarse_clock_ns)
  std::string missing = "not a weft program, or it never started";  // why there is no ring
};

// One line per finding, the verdict first: ranks found stopped, and the operation each was
// in; ranks that called different collectives at the same sequence number (diverged); ranks behind
// the others on a group (named with their last collective there and their status, the others with
// the one they wait in and for how long); point-to-point operations that did not complete, and
// whether their peers were in one too (a deadlock) or in none (the peer is stuck elsewhere); ranks
// without a ring, and what the others were in; else, when nothing else was found, that the stop was
// not in communication. Nothing when no rank has a ring.
std::vector<std::string> diagnose(const std::vector<RankView>& ranks);

// A rank that arrives last at most collectives of a group (at least 8, three quarters of them)
// and keeps the others waiting at least a tenth of the time they span: "rank 1 is a straggler
// on group 'world': ...". Needs the ranks' rings on one machine's clock.
std::optional<std::string> straggler(const std::vector<RankView>& ranks);

}  // namespace weft::recorder
