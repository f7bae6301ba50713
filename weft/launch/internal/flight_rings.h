// The flight recorders' rings of this node's workers for one attempt: one memfd each,
// zero-filled, mapped here and handed to its worker (WEFT_FLIGHT_RECORDER_FD), so that weftrun
// reads a worker's ring whatever state the worker is in, and after it died. No name in
// /dev/shm: nothing is left behind, and no other process can open them.
#pragma once

#include <string>
#include <vector>

#include "weft/base/unique_fd.h"

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
  // What the rings say about why the attempt failed (weft/recorder/diagnosis.h); `ranks` are
  // the workers' job ranks, and rank `failed` ended as `failed_status` says.
  std::vector<std::string> diagnose(const std::vector<int>& ranks, int failed,
                                    const std::string& failed_status) const;

 private:
  std::vector<UniqueFd> fds_;
  std::vector<void*> maps_;
};

}  // namespace weft::launch::internal
