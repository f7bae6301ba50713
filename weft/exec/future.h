// weft::Future<T>: the result of work submitted to an executor, the C++ counterpart of
// Python's concurrent.futures.Future.
//
// A Future is a cheap, copyable handle to shared state (like std::shared_future): copies
// refer to the same result, so weft::wait() and weft::as_completed() hand back the very
// futures they were given. All member functions are thread-safe.
//
// Deadlock hazard: a task that calls get()/wait() on a future of the same executor blocks
// one of its workers; if every worker does so, nothing runs. Do not wait on your own pool
// from inside it unless it has spare workers.
#pragma once

#include <concepts>
#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "weft/base/check.h"
#include "weft/base/deadline.h"
#include "weft/base/error.h"
#include "weft/exec/internal/future_state.h"

namespace weft {

template <class T>
class [[nodiscard]] Future {
  static_assert(!std::is_reference_v<T>, "Future<T&> is not supported; return a value");

 public:
  using value_type = T;
  using State = internal::FutureState<T>;

  // An empty handle; valid() is false and every other member is a precondition violation.
  Future() = default;
  explicit Future(std::shared_ptr<State> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }

  // Blocks until the task finished and returns its result (a reference into the shared
  // state, valid while any handle lives). Rethrows the task's exception with its original
  // type; throws weft::CancelledError if the future was cancelled.
  decltype(auto) get() const& {
    state().wait();
    return result();
  }
  // On a temporary future (`pool.submit(f).get()`), a copy of the result: a reference into
  // the shared state would dangle once the temporary is gone, as in a range-for over it.
  auto get() const&& requires(!std::is_void_v<T> && std::copy_constructible<T>) {
    state().wait();
    return T(result());
  }
  void get() const&& requires std::is_void_v<T> {
    state().wait();
    result();
  }
  // As get(), but throws weft::TimeoutError if the result is not there within `timeout`.
  decltype(auto) get(Seconds timeout) const& {
    wait_or_throw(timeout);
    return result();
  }
  auto get(Seconds timeout) const&& requires(!std::is_void_v<T> && std::copy_constructible<T>) {
    wait_or_throw(timeout);
    return T(result());
  }
  void get(Seconds timeout) const&& requires std::is_void_v<T> {
    wait_or_throw(timeout);
    result();
  }

  void wait() const { state().wait(); }

  // True if the future is done (finished or cancelled) within `timeout`.
  bool wait_for(Seconds timeout) const { return state().wait_until(Deadline::after(timeout)); }

  bool done() const { return state().done(); }
  bool running() const { return state().status() == State::Status::kRunning; }
  bool cancelled() const { return state().status() == State::Status::kCancelled; }
  // Cancels the task if it has not started; true if it is (now) cancelled, false once it
  // runs or has finished.
  bool cancel() const { return state().cancel(); }

  // Blocks until done; returns the task's exception, or nullptr if it succeeded. Throws
  // weft::CancelledError if cancelled and weft::TimeoutError when `timeout` passes first.
  std::exception_ptr exception(std::optional<Seconds> timeout = std::nullopt) const {
    if (!state().wait_until(Deadline::after(timeout))) {
      throw TimeoutError("Future::exception: the task did not finish in time");
    }
    throw_if_cancelled();
    return state().error();
  }

  // Runs `callback` once the future is done, on the thread that completes (or cancels) it,
  // or at once on this thread if it is already done. `callback` takes the Future or nothing.
  // Exceptions thrown by callbacks are printed to stderr and otherwise ignored.
  template <class Callback>
  void add_done_callback(Callback callback) const {
    if constexpr (std::invocable<Callback&, const Future&>) {
      // A weak reference: the state must not keep itself alive through its own callback.
      std::weak_ptr<State> weak = state_;
      state().add_done_callback([weak, cb = std::move(callback)]() mutable {
        if (auto s = weak.lock()) cb(Future(std::move(s)));
      });
    } else {
      static_assert(std::invocable<Callback&>,
                    "add_done_callback takes a callable with signature void(const Future<T>&) "
                    "or void()");
      state().add_done_callback(std::move(callback));
    }
  }

  // The shared state, for weft::wait / as_completed; equal for copies of one future.
  const std::shared_ptr<State>& shared_state() const { return state_; }
  friend bool operator==(const Future& a, const Future& b) { return a.state_ == b.state_; }

 private:
  State& state() const {
    WEFT_CHECK(state_ != nullptr);
    return *state_;
  }
  void wait_or_throw(Seconds timeout) const {
    if (!state().wait_until(Deadline::after(timeout))) {
      throw TimeoutError("Future::get: the result was not ready within " +
                         std::to_string(timeout.count()) +
                         " s; wait longer or check that the executor is still running");
    }
  }
  void throw_if_cancelled() const {
    if (cancelled()) throw CancelledError("the future was cancelled before its task ran");
  }
  decltype(auto) result() const {
    throw_if_cancelled();
    if (auto error = state_->error()) std::rethrow_exception(error);
    if constexpr (!std::is_void_v<T>) return static_cast<const T&>(state_->value());
  }

  std::shared_ptr<State> state_;
};

}  // namespace weft
