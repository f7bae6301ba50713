// FunctionRef<R(Args...)>: a non-owning reference to a callable, for parameters that are
// called before the function returns (absl::FunctionRef's idea). Unlike std::function it
// never allocates, so hot paths can take a lambda without a heap round trip. The callable
// must outlive the FunctionRef: never store one.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace weft {

template <class Signature>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                              std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): used like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace weft
