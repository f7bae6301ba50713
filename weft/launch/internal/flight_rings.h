// The flight recorders' rings of this node's workers for one attempt: one memfd each,
// zero-filled, mapped here and handed to its worker (WEFT_FLIGHT_RECORDER_FD), so that weftrun
// reads a worker's ring whatever state the worker is in, and after it died. No name in
// /dev/shm: nothing is left behind, and no other process can open them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "weft/base/unique_fd.h"
#include "weft/recorder/diagnosis.h"

namespace weft::launch::internal {

class FlightRings {
 public:
  // Rings for `workers` workers; none when WEFT_FLIGHT_RECORDER=0 or the memory cannot be had
  // (the job then runs unrecorded).
  explicit FlightRings(int workers);
  ~FlightRings();
  FlightRings(const FlightRings&) = delete;
  FlightRings& operator=(const FlightRings&) = delete;

  // The descriptor worker `local` inherits; -1 when there are no rings.
  int fd(int local) const;
  // What the rings say about why the attempt failed or was interrupted
  // (weft/recorder/diagnosis.h); `ranks` are the workers' job ranks, `endings` how each
  // ended ("exited with code 1") and `stopped` whether each was found stopped. With
  // WEFT_FLIGHT_RECORDER_DUMP=PREFIX set, also writes each ring to PREFIX<rank>.json (for
  // weft-fr, which reads every node's) and says so.
  std::vector<std::string> diagnose(const std::vector<int>& ranks,
                                    const std::vector<std::string>& endings,
                                    const std::vector<bool>& stopped) const;
  // A straggler among the workers of an attempt that succeeded (recorder::straggler).
  std::optional<std::string> straggler(const std::vector<int>& ranks) const;

 private:
  std::vector<recorder::RankView> views(const std::vector<int>& ranks) const;

  std::vector<UniqueFd> fds_;
  std::vector<void*> maps_;
};

}  // namespace weft::launch::internal
