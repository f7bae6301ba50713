#include "weft/exec/internal/future_state.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace weft::internal {
namespace {

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

bool FutureStateBase::cancel() {
  Status expected = Status::kPending;
  // The transition is a CAS so that a worker starting the task and a caller cancelling it
  // agree on exactly one winner without taking the lock on the worker's hot path.
  if (!status_.compare_exchange_strong(expected, Status::kCancelled, std::memory_order_acq_rel)) {
    return expected == Status::kCancelled;
  }
  finish(Status::kCancelled);
  return true;
}

bool FutureStateBase::set_running_or_notify_cancel() {
  Status expected = Status::kPending;
  return status_.compare_exchange_strong(expected, Status::kRunning, std::memory_order_acq_rel);
}

void FutureStateBase::set_exception(std::exception_ptr error) {
  error_ = std::move(error);
  finish(Status::kFinished);
}

void FutureStateBase::wait() const {
  if (done()) return;
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return done(); });
}

bool FutureStateBase::wait_until(Deadline deadline) const {
  if (done()) return true;
  if (deadline.is_never()) {
    wait();
    return true;
  }
  std::unique_lock lock(mu_);
  return cv_.wait_until(lock, deadline.when(), [this] { return done(); });
}

void FutureStateBase::add_done_callback(std::function<void()> callback) {
  {
    std::lock_guard lock(mu_);
    if (!done()) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  run_callback(callback);
}

bool FutureStateBase::add_waiter(const std::shared_ptr<Waiter>& waiter) {
  std::lock_guard lock(mu_);
  if (done()) return false;
  waiters_.push_back(waiter);
  return true;
}

void FutureStateBase::remove_waiter(const Waiter* waiter) {
  std::lock_guard lock(mu_);
  std::erase_if(waiters_, [waiter](const auto& w) { return w.get() == waiter; });
}

void FutureStateBase::finish(Status final_status) {
  std::vector<std::function<void()>> callbacks;
  std::vector<std::shared_ptr<Waiter>> waiters;
  {
    // The status is published under the lock so that a waiter that checked done() under
    // the same lock cannot miss the notification.
    std::lock_guard lock(mu_);
    status_.store(final_status, std::memory_order_release);
    callbacks.swap(callbacks_);
    waiters.swap(waiters_);
  }
  cv_.notify_all();
  for (const auto& waiter : waiters) waiter->notify(this);
  for (auto& callback : callbacks) run_callback(callback);
}

}  // namespace weft::internal
