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

// A reader of the record through the attempt's store. Not thread-safe.
class DeathLog {
 public:
  // Reads the deaths recorded since the last refresh: one request, and one per new death.
  // A rank outside [0, job_size) is weft::Error (the store holds another job's keys).
  void refresh(Store& attempt, int job_size);
  // The deaths read so far.
  std::int64_t size() const { return static_cast<std::int64_t>(ranks_.size()); }
  // Whether `job_rank` died after the first `seen` deaths.
  bool died_after(int job_rank, std::int64_t seen) const;

 private:
  std::vector<int> ranks_;
};

}  // namespace weft::store
