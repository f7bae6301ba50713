// The deaths of a job's processes, as its launcher saw them, in the job's store: weftrun
// (--recover in-place or elastic) records each death before it starts the replacement, and
// the job's processes read the record to tell a dead member from a slow one (weft/dist/
// elastic.h, docs/RECOVERY.md).
//
// Under the attempt's prefix ("attempt<N>/", as dist::connect_job_store's), "deaths/count"
// counts them and "deaths/<k>" holds the job rank of the k-th (from 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/store/store.h"

namespace weft::store {

// The prefix of attempt `attempt`'s keys (WEFT_RESTART_COUNT).
std::string attempt_prefix(int attempt);

// Records that the process of `job_rank` died, in `job` (the job's store, unprefixed) under
// attempt `attempt`. Two requests, each bounded by the store's timeout.
void record_death(Store& job, int attempt, int job_rank);

// A reader of the record through the attempt's store. A death is ordered by its count (the
// count goes up first, then its rank is written): a rank not written yet is read at a later
// refresh, and the deaths after it wait for it. Not thread-safe.
class DeathLog {
 public:
  // Reads the count and the ranks recorded since the last refresh: one request, and two per
  // new death. A rank outside [0, job_size) is weft::Error (the store holds another job's
  // keys).
  void refresh(Store& attempt, int job_size);
  // The count at the last refresh: deaths numbered above it come after that refresh.
  std::int64_t counted() const { return counted_; }
  // Whether a death numbered above `seen` is `job_rank`'s, among those read so far.
  bool died_after(int job_rank, std::int64_t seen) const;

 private:
  std::int64_t counted_ = 0;
  std::vector<int> ranks_;  // the k-th death's at k - 1, up to the first not written yet
};

}  // namespace weft::store
