#include "weft/exec/wait.h"

namespace weft::internal {

CompletionWatch::CompletionWatch(std::vector<FutureStateBase*> states)
    : states_(std::move(states)), waiter_(std::make_shared<Waiter>()), total_(states_.size()) {
  index_of_.reserve(states_.size());
  for (std::size_t i = 0; i < states_.size(); ++i) {
    index_of_.emplace(states_[i], i);
    if (!states_[i]->add_waiter(waiter_)) ready_.push_back(i);
  }
}

CompletionWatch::~CompletionWatch() {
  for (FutureStateBase* state : states_) state->remove_waiter(waiter_.get());
}

std::optional<std::size_t> CompletionWatch::next(Deadline deadline) {
  while (ready_.empty()) {
    const auto finished = waiter_->take(deadline);
    if (finished.empty()) return std::nullopt;  // deadline passed
    for (const FutureStateBase* state : finished) ready_.push_back(index_of_.at(state));
  }
  const std::size_t index = ready_.front();
  ready_.pop_front();
  ++reported_;
  return index;
}

}  // namespace weft::internal
