// The shared state behind weft::Future: written once by whoever runs the task, read by
// every Future handle that refers to it. Not part of the public API.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "weft/base/deadline.h"

namespace weft::internal {

class FutureStateBase;

// Collects the states that finish while a weft::wait() or weft::as_completed() call is
// watching them. Registered with each unfinished state; notified once per state.
class Waiter {
 public:
  void notify(const FutureStateBase* state);
  // Blocks until at least one state was notified or `deadline` passes; returns (and
  // forgets) the states notified so far, possibly none.
  std::vector<const FutureStateBase*> take(Deadline deadline);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<const FutureStateBase*> finished_;
};

class FutureStateBase {
 public:
  enum class Status : std::uint32_t { kPending, kRunning, kFinished, kCancelled };

  FutureStateBase() = default;
  FutureStateBase(const FutureStateBase&) = delete;
  FutureStateBase& operator=(const FutureStateBase&) = delete;
  virtual ~FutureStateBase();

  Status status() const { return status_of(word_.load(std::memory_order_acquire)); }
  bool done() const { return is_done(word_.load(std::memory_order_acquire)); }

  // Pending -> cancelled. False once the task runs or has finished.
  bool cancel();
  // Called by the executor just before running the task: pending -> running, or false if
  // the future was cancelled (then the task must not run).
  bool set_running_or_notify_cancel();
  void set_exception(std::exception_ptr error);

  // Block until done; wait_until returns false if `deadline` passed first.
  void wait() const { wait_until(Deadline::never()); }
  bool wait_until(Deadline deadline) const;

  // Only valid once done() and not cancelled.
  std::exception_ptr error() const { return error_; }

  // Runs `callback` when the state finishes, or at once (on this thread) if it already has.
  void add_done_callback(std::function<void()> callback);

  // Registers `waiter` to be notified on finishing; false (and not registered) if done.
  bool add_waiter(const std::shared_ptr<Waiter>& waiter);
  void remove_waiter(const Waiter* waiter);

 protected:
  // Publishes the result written by the subclass and notifies everyone watching.
  void finish(Status final_status);

 private:
  // Callbacks and wait()/as_completed() registrations: rare, so kept out of line and made
  // on first use; most futures never have any.
  struct Watchers {
    std::mutex mu;
    std::vector<std::function<void()>> callbacks;
    std::vector<std::shared_ptr<Waiter>> waiters;
  };

  // word_ holds the Status in its low byte and kSleepersBit while a thread may sleep on it.
  static constexpr std::uint32_t kStatusMask = 0xff;
  static constexpr std::uint32_t kSleepersBit = 0x100;
  static Status status_of(std::uint32_t word) { return static_cast<Status>(word & kStatusMask); }
  static bool is_done(std::uint32_t word) {
    const Status s = status_of(word);
    return s == Status::kFinished || s == Status::kCancelled;
  }

  void notify(std::uint32_t old_word);
  Watchers& watchers();

  mutable std::atomic<std::uint32_t> word_{0};
  std::exception_ptr error_;
  std::atomic<Watchers*> watchers_{nullptr};
};

template <class T>
class FutureState : public FutureStateBase {
 public:
  template <class U>
  void set_value(U&& value) {
    value_.emplace(std::forward<U>(value));
    finish(Status::kFinished);
  }
  // Only valid once finished without an exception.
  const T& value() const { return *value_; }

 private:
  std::optional<T> value_;
};

template <>
class FutureState<void> : public FutureStateBase {
 public:
  void set_value() { finish(Status::kFinished); }
};

// Something an executor's worker can run.
class Runnable {
 public:
  virtual ~Runnable() = default;
  virtual void run() = 0;
  // The executor will never run this task (shutdown with cancel_futures, broken pool).
  virtual void abandon(std::exception_ptr reason) = 0;
  // Cancels if still pending; used by shutdown(cancel_futures = true).
  virtual bool cancel() = 0;
};

// A callable bound to its arguments plus the state its result goes to, in one allocation.
template <class R, class Fn>
class TaskState final : public FutureState<R>, public Runnable {
 public:
  explicit TaskState(Fn fn) : fn_(std::move(fn)) {}

  void run() override {
    if (!this->set_running_or_notify_cancel()) return;
    try {
      if constexpr (std::is_void_v<R>) {
        (*fn_)();
        release();
        this->set_value();
      } else {
        auto value = (*fn_)();
        release();
        this->set_value(std::move(value));
      }
    } catch (...) {
      release();
      this->set_exception(std::current_exception());
    }
  }
  void abandon(std::exception_ptr reason) override {
    if (this->set_running_or_notify_cancel()) {
      release();
      this->set_exception(std::move(reason));
    }
  }
  bool cancel() override { return FutureState<R>::cancel(); }

 private:
  // The callable and its bound arguments are freed as soon as they have run, not when the
  // last Future goes: futures may be kept long after, and may even be captured by it.
  void release() { fn_.reset(); }

  std::optional<Fn> fn_;
};

}  // namespace weft::internal
