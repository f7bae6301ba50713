#include "weft/dist/threads/thread_transport.h"

#include <algorithm>

namespace weft::dist {

ThreadHub::ThreadHub(int world_size) {
  for (int i = 0; i < world_size; ++i)
    boxes_.push_back(std::make_unique<Mailbox>(/*recycles=*/true));
}

void ThreadHub::abort(const std::string& reason) {
  for (auto& box : boxes_) box->abort(reason);
}

void ThreadHub::note_arrival(Tag op, int rank, int group_size) {
  std::lock_guard lock(arrivals_mu_);
  std::vector<int>& in = arrivals_[op];
  in.push_back(rank);
  // Everyone arrived: nothing left to report for this collective.
  if (static_cast<int>(in.size()) == group_size) arrivals_.erase(op);
}

std::vector<int> ThreadHub::not_arrived(Tag op, const std::vector<int>& ranks) {
  std::lock_guard lock(arrivals_mu_);
  const auto it = arrivals_.find(op);
  // No entry: everyone arrived (the entry is dropped then), and the delay is elsewhere.
  if (it == arrivals_.end()) return {};
  std::vector<int> missing;
  for (int r : ranks) {
    if (std::find(it->second.begin(), it->second.end(), r) == it->second.end()) {
      missing.push_back(r);
    }
  }
  return missing;
}

}  // namespace weft::dist
