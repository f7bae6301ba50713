#include "weft/exec/internal/future_state.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>

#include "weft/base/futex.h"
#include "weft/base/spin.h"

namespace weft::internal {
namespace {

// How long Future::get() and wait() poll before sleeping on the future's futex: a small task
// finishes sooner than a sleep and a wake-up take (the submit -> get round trip went from
// about 1 us to 0.4 us).
constexpr int kWaitSpinRounds = 64;

// Like concurrent.futures: a failing callback is reported and must not stop the others,
// the worker that completed the future, or the caller that added it.
void run_callback(const std::function<void()>& callback) {
  try {
    callback();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft: exception in a Future done-callback ignored: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "weft: non-standard exception in a Future done-callback ignored\n");
  }
}

}  // namespace

void Waiter::notify(const FutureStateBase* state) {
  {
    std::lock_guard lock(mu_);
    finished_.push_back(state);
  }
  cv_.notify_one();
}

std::vector<const FutureStateBase*> Waiter::take(Deadline deadline) {
  std::unique_lock lock(mu_);
  const auto ready = [this] { return !finished_.empty(); };
  if (deadline.is_never()) {
    cv_.wait(lock, ready);
  } else {
    cv_.wait_until(lock, deadline.when(), ready);
  }
  return std::exchange(finished_, {});
}

FutureStateBase::~FutureStateBase() { delete watchers_.load(std::memory_order_relaxed); }

bool FutureStateBase::cancel() {
  // A CAS, so that a worker starting the task and a caller cancelling it agree on exactly
  // one winner without a lock.
  std::uint32_t word = word_.load(std::memory_order_acquire);
  for (;;) {
    if (status_of(word) == Status::kCancelled) return true;
    if (status_of(word) != Status::kPending) return false;
    if (word_.compare_exchange_weak(word, static_cast<std::uint32_t>(Status::kCancelled))) break;
  }
  notify(word);
  return true;
}

bool FutureStateBase::set_running_or_notify_cancel() {
  std::uint32_t word = word_.load(std::memory_order_acquire);
  while (status_of(word) == Status::kPending) {
    const std::uint32_t running =
        (word & ~kStatusMask) | static_cast<std::uint32_t>(Status::kRunning);
    if (word_.compare_exchange_weak(word, running, std::memory_order_acq_rel)) return true;
  }
  return false;
}

void FutureStateBase::set_exception(std::exception_ptr error) {
  error_ = std::move(error);
  finish(Status::kFinished);
}

void FutureStateBase::finish(Status final_status) {
  notify(word_.exchange(static_cast<std::uint32_t>(final_status)));
}

bool FutureStateBase::wait_until(Deadline deadline) const {
  // Small tasks finish within microseconds: polling that long is cheaper than the two
  // system calls and the context switch of sleeping and being woken.
  for (int round = 0; round < kWaitSpinRounds; ++round) {
    if (done()) return true;
    spin_pause(round);
  }
  for (;;) {
    std::uint32_t word = word_.load(std::memory_order_acquire);
    if (is_done(word)) return true;
    if (deadline.expired()) return false;
    // Announce a sleeper first, so that the finishing thread knows to make the wake call.
    if ((word & kSleepersBit) == 0) {
      if (!word_.compare_exchange_weak(word, word | kSleepersBit)) continue;
      word |= kSleepersBit;
    }
    futex_wait(word_, word, deadline, FutexScope::kPrivate);
  }
}

void FutureStateBase::notify(std::uint32_t old_word) {
  if ((old_word & kSleepersBit) != 0) futex_wake_all(word_, FutexScope::kPrivate);
  // seq_cst, pairing with watchers(): either we see the watchers a registering thread made,
  // or it sees the final status and handles its own callback.
  Watchers* w = watchers_.load();
  if (w == nullptr) return;
  std::vector<std::function<void()>> callbacks;
  std::vector<std::shared_ptr<Waiter>> waiters;
  {
    std::lock_guard lock(w->mu);
    callbacks.swap(w->callbacks);
    waiters.swap(w->waiters);
  }
  for (const auto& waiter : waiters) waiter->notify(this);
  for (auto& callback : callbacks) run_callback(callback);
}

FutureStateBase::Watchers& FutureStateBase::watchers() {
  Watchers* w = watchers_.load();
  if (w != nullptr) return *w;
  auto fresh = std::make_unique<Watchers>();
  if (watchers_.compare_exchange_strong(w, fresh.get())) return *fresh.release();
  return *w;  // another thread made them first
}

void FutureStateBase::add_done_callback(std::function<void()> callback) {
  Watchers& w = watchers();
  {
    std::lock_guard lock(w.mu);
    if (!is_done(word_.load())) {
      w.callbacks.push_back(std::move(callback));
      return;
    }
  }
  run_callback(callback);
}

bool FutureStateBase::add_waiter(const std::shared_ptr<Waiter>& waiter) {
  Watchers& w = watchers();
  std::lock_guard lock(w.mu);
  if (is_done(word_.load())) return false;
  w.waiters.push_back(waiter);
  return true;
}

void FutureStateBase::remove_waiter(const Waiter* waiter) {
  Watchers* w = watchers_.load();
  if (w == nullptr) return;
  std::lock_guard lock(w->mu);
  std::erase_if(w->waiters, [waiter](const auto& p) { return p.get() == waiter; });
}

}  // namespace weft::internal
