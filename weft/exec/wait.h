// weft::wait and weft::as_completed: waiting on many futures at once, as in Python's
// concurrent.futures. Both take any range of Future<T> and hand back copies of those very
// futures (equal with ==). Duplicates in the input are reported once.
#pragma once

#include <cstddef>
#include <deque>
#include <iterator>
#include <memory>
#include <optional>
#include <ranges>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "weft/exec/future.h"

namespace weft {

enum class ReturnWhen { kFirstCompleted, kFirstException, kAllCompleted };

template <class T>
struct WaitResult {
  std::vector<Future<T>> done;      // in input order
  std::vector<Future<T>> not_done;  // in input order
};

namespace internal {

// Watches a fixed set of states and reports, one at a time, those that finish.
// Not thread-safe: one consumer.
class CompletionWatch {
 public:
  explicit CompletionWatch(std::vector<FutureStateBase*> states);
  ~CompletionWatch();
  CompletionWatch(const CompletionWatch&) = delete;
  CompletionWatch& operator=(const CompletionWatch&) = delete;

  // Index (into the constructor's vector) of the next state to finish, blocking until
  // `deadline`; std::nullopt when the deadline passes first. Precondition: remaining() > 0.
  std::optional<std::size_t> next(Deadline deadline);
  std::size_t remaining() const { return total_ - reported_; }

 private:
  std::vector<FutureStateBase*> states_;
  std::unordered_map<const FutureStateBase*, std::size_t> index_of_;
  std::shared_ptr<Waiter> waiter_;
  std::deque<std::size_t> ready_;  // finished but not yet reported
  std::size_t total_;
  std::size_t reported_ = 0;
};

template <class T, class Range>
std::vector<Future<T>> unique_futures(const Range& futures) {
  std::vector<Future<T>> out;
  std::unordered_set<const void*> seen;
  for (const Future<T>& f : futures) {
    if (seen.insert(f.shared_state().get()).second) out.push_back(f);
  }
  return out;
}

template <class T>
std::vector<FutureStateBase*> states_of(const std::vector<Future<T>>& futures) {
  std::vector<FutureStateBase*> states;
  states.reserve(futures.size());
  for (const auto& f : futures) states.push_back(f.shared_state().get());
  return states;
}

}  // namespace internal

// Blocks until the condition holds or `timeout` passes (then returns what is done so far;
// it does not throw on timeout, like Python's wait).
//   kFirstCompleted: any future finishes or is cancelled;
//   kFirstException: any future finishes by throwing, else all complete;
//   kAllCompleted:   every future is done.
template <std::ranges::input_range Range>
auto wait(const Range& futures, std::optional<Seconds> timeout = std::nullopt,
          ReturnWhen return_when = ReturnWhen::kAllCompleted) {
  using T = typename std::ranges::range_value_t<Range>::value_type;
  const Deadline deadline = Deadline::after(timeout);
  std::vector<Future<T>> unique = internal::unique_futures<T>(futures);
  internal::CompletionWatch watch(internal::states_of(unique));
  const auto satisfied = [&](std::size_t index) {
    const Future<T>& f = unique[index];
    switch (return_when) {
      case ReturnWhen::kFirstCompleted:
        return true;
      case ReturnWhen::kFirstException:
        return !f.cancelled() && f.shared_state()->error() != nullptr;
      case ReturnWhen::kAllCompleted:
        return false;
    }
    return false;
  };
  bool stop = false;
  while (!stop && watch.remaining() > 0) {
    const auto index = watch.next(deadline);
    if (!index) break;
    stop = satisfied(*index);
  }
  WaitResult<T> result;
  for (auto& f : unique) (f.done() ? result.done : result.not_done).push_back(std::move(f));
  return result;
}

// Yields the futures as they complete (finished or cancelled), those already done first.
// Iterating throws weft::TimeoutError if the next one is not done before `timeout`
// (counted from the as_completed call).
//
//   for (weft::Future<int>& f : weft::as_completed(futures)) use(f.get());
template <class T>
class AsCompleted {
 public:
  AsCompleted(std::vector<Future<T>> futures, Deadline deadline)
      : futures_(std::move(futures)), watch_(internal::states_of(futures_)), deadline_(deadline) {}

  // The next completed future, or std::nullopt once all have been yielded.
  std::optional<Future<T>> next() {
    if (watch_.remaining() == 0) return std::nullopt;
    const auto index = watch_.next(deadline_);
    if (!index) {
      throw TimeoutError("as_completed: " + std::to_string(watch_.remaining()) + " (of " +
                         std::to_string(futures_.size()) +
                         ") futures unfinished when the timeout passed");
    }
    return futures_[*index];
  }

  class iterator {
   public:
    using value_type = Future<T>;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    explicit iterator(AsCompleted* owner) : owner_(owner) { advance(); }
    Future<T>& operator*() const { return *current_; }
    Future<T>* operator->() const { return &*current_; }
    iterator& operator++() {
      advance();
      return *this;
    }
    void operator++(int) { advance(); }
    friend bool operator==(const iterator& it, std::default_sentinel_t) { return !it.current_; }

   private:
    void advance() { current_ = owner_->next(); }
    AsCompleted* owner_ = nullptr;
    mutable std::optional<Future<T>> current_;
  };

  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() { return {}; }

 private:
  std::vector<Future<T>> futures_;
  internal::CompletionWatch watch_;
  Deadline deadline_;
};

template <std::ranges::input_range Range>
auto as_completed(const Range& futures, std::optional<Seconds> timeout = std::nullopt) {
  using T = typename std::ranges::range_value_t<Range>::value_type;
  return AsCompleted<T>(internal::unique_futures<T>(futures), Deadline::after(timeout));
}

}  // namespace weft
