// Promise<T>: the writing end of a Future<T> that no executor runs, for code that finishes
// work itself (a process group's operations complete on its queue thread), like std::promise.
//
//   weft::Promise<void> done;
//   weft::Future<void> f = done.get_future();   // any number of times: handles share state
//   done.set_value();                           // or done.set_exception(std::current_exception())
//
// Contract: set_value or set_exception at most once (a second call is a precondition
// violation, WEFT_CHECK). Waiters on the futures are woken by it; a Promise destroyed without
// either leaves its futures pending (wait with a deadline). Thread-safe: one thread may set
// while others wait.
#pragma once

#include <exception>
#include <memory>
#include <type_traits>
#include <utility>

#include "weft/base/check.h"
#include "weft/exec/future.h"

namespace weft {

template <class T>
class Promise {
 public:
  Promise() : state_(std::make_shared<internal::FutureState<T>>()) {}

  Future<T> get_future() const { return Future<T>(state_); }

  template <class U = T>
  void set_value(U&& value) requires(!std::is_void_v<T>) {
    WEFT_CHECK(!state_->done());
    state_->set_value(std::forward<U>(value));
  }
  void set_value() requires std::is_void_v<T> {
    WEFT_CHECK(!state_->done());
    state_->set_value();
  }
  void set_exception(std::exception_ptr error) {
    WEFT_CHECK(!state_->done());
    state_->set_exception(std::move(error));
  }

 private:
  std::shared_ptr<internal::FutureState<T>> state_;
};

}  // namespace weft
