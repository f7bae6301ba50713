#include "weft/store/death_log.h"

#include <algorithm>

#include "weft/base/error.h"
#include "weft/base/parse.h"

namespace weft::store {
namespace {

constexpr char kCount[] = "deaths/count";

std::string death_key(std::int64_t k) { return "deaths/" + std::to_string(k); }

}  // namespace

std::string attempt_prefix(int attempt) { return "attempt" + std::to_string(attempt); }

void record_death(Store& job, int attempt, int job_rank) {
  const std::string prefix = attempt_prefix(attempt) + "/";
  const std::int64_t k = job.add(prefix + kCount, 1);
  job.set(prefix + death_key(k), std::to_string(job_rank));
}

void DeathLog::refresh(Store& attempt, int job_size) {
  const std::int64_t count = attempt.add(kCount, 0);
  counted_ = std::max(counted_, count);
  for (auto k = static_cast<std::int64_t>(ranks_.size()) + 1; k <= count; ++k) {
    const std::string key = death_key(k);
    if (!attempt.check({key})) return;
    const std::string text = attempt.get(key);
    const std::optional<std::int64_t> rank = parse_integer(text, 0, job_size - 1);
    if (!rank) {
      throw Error("the job's store holds '" + text + "' at " + key +
                  ", not a rank of this job of " + std::to_string(job_size) +
                  " (another job sharing the store?)");
    }
    ranks_.push_back(static_cast<int>(*rank));
  }
}

bool DeathLog::died_after(int job_rank, std::int64_t seen) const {
  const auto from =
      ranks_.begin() + std::clamp<std::int64_t>(seen, 0, static_cast<std::int64_t>(ranks_.size()));
  return std::find(from, ranks_.end(), job_rank) != ranks_.end();
}

}  // namespace weft::store
