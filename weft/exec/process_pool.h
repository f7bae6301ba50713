// weft::ProcessPoolExecutor: runs plain functions in worker processes and returns futures,
// with the behaviour of Python's concurrent.futures.ProcessPoolExecutor. Processes have
// separate memory: arguments and results are copied through a socket (serialize.h), never
// shared through pointers.
//
//   int square(int x) { return x * x; }
//   weft::ProcessPoolExecutor pool(4);
//   weft::Future<int> f = pool.submit(square, 7);   // runs in another process
//   int y = f.get();                                // 49
//
// Workers are forked when the pool is constructed (max_workers of them) and replaced when
// one dies. fork() copies the calling process: construct the pool early, before other
// threads hold locks the tasks need (the same caveat as Python's "fork" start method).
// The function is sent as its address, which is valid in the forked copy; functions from
// libraries loaded after the pool started are not. Workers inherit stdout and stderr.
//
// A worker that dies while running a task (a signal, abort, exit) fails that task's future
// with weft::BrokenProcessPool naming the signal or exit code, within a second; the pool
// starts a new worker and keeps serving. A task that throws fails its future with
// weft::RemoteError (the exception's type name and what()).
//
// Thread-safety: every member function may be called from any thread, concurrently.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ranges>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/exec/future.h"
#include "weft/exec/internal/remote_task.h"
#include "weft/exec/map.h"
#include "weft/exec/serialize.h"

namespace weft {

namespace internal {
class ProcessPoolImpl;

// A function, function reference or pointer, or a lambda without captures: anything whose
// unary + yields a function pointer.
template <class F>
concept PlainFunction = requires(F& f) {
  +f;
}
&&std::is_pointer_v<decltype(+std::declval<F&>())>&&
    std::is_function_v<std::remove_pointer_t<decltype(+std::declval<F&>())>>;

// Parameters are received by value or by const reference; a non-const reference could
// never send its changes back.
template <class P>
inline constexpr bool kValidParameter =
    !(std::is_lvalue_reference_v<P> &&
      !std::is_const_v<std::remove_reference_t<P>>)&&Serializable<std::decay_t<P>>;
}  // namespace internal

class ProcessPoolExecutor {
 public:
  // max_workers = 0 means one worker per available core. Forks the workers now; throws
  // weft::SystemError if the system cannot create them.
  explicit ProcessPoolExecutor(std::size_t max_workers = 0);
  // Shuts down with wait = true.
  ~ProcessPoolExecutor();
  ProcessPoolExecutor(const ProcessPoolExecutor&) = delete;
  ProcessPoolExecutor& operator=(const ProcessPoolExecutor&) = delete;

  // Schedules fn(args...) in a worker process. `fn` is a plain function or a lambda without
  // captures; each argument converts to the matching parameter type, which must be
  // serializable (serialize.h). Throws weft::ExecutorShutdown after shutdown() and
  // weft::BrokenProcessPool if workers can no longer be started.
  template <class F, class... Args>
  [[nodiscard]] auto submit(F&& fn, Args&&... args) {
    static_assert(internal::PlainFunction<std::remove_reference_t<F>>,
                  "ProcessPoolExecutor::submit takes a plain function or a lambda without "
                  "captures: captured state cannot cross the process boundary");
    return submit_function(+fn, std::forward<Args>(args)...);
  }

  // Applies fn to every element in worker processes, `chunksize` elements per message, and
  // returns the results in input order (see MapResults). An element that throws is
  // rethrown as weft::RemoteError when its result is reached.
  template <class F, std::ranges::input_range Range>
  [[nodiscard]] auto map(F&& fn, const Range& inputs, MapOptions options = {}) {
    static_assert(internal::PlainFunction<std::remove_reference_t<F>>,
                  "ProcessPoolExecutor::map takes a plain function or a lambda without captures");
    return map_function(+fn, inputs, options);
  }

  // As ThreadPoolExecutor::shutdown. With wait = true, also stops and reaps the workers.
  void shutdown(bool wait = true, bool cancel_futures = false);

  std::size_t max_workers() const;
  // The live workers' process ids (for monitoring, and for tests that kill one).
  std::vector<pid_t> worker_pids() const;

 private:
  template <class R, class... P, class... Args>
  Future<R> submit_function(R (*fn)(P...), Args&&... args) {
    static_assert(sizeof...(P) == sizeof...(Args), "wrong number of arguments for the function");
    static_assert((internal::kValidParameter<P> && ...),
                  "ProcessPoolExecutor: every parameter must be taken by value or const "
                  "reference and be serializable: a trivially copyable type without "
                  "pointers, std::string, or std::vector of those");
    static_assert(std::is_void_v<R> || Serializable<R>,
                  "ProcessPoolExecutor: the result type must be void or serializable: a "
                  "trivially copyable type without pointers, std::string, or std::vector of "
                  "those");
    ByteWriter request;
    internal::write_call_header(request, &internal::remote_call<R, P...>, fn);
    (request.write(static_cast<std::decay_t<P>>(std::forward<Args>(args))), ...);
    auto task = std::make_shared<internal::RemoteTask<R>>(std::move(request.buffer()));
    Future<R> future(task);
    enqueue(std::move(task));
    return future;
  }

  template <class R, class P, class Range>
  auto map_function(R (*fn)(P), const Range& inputs, MapOptions options) {
    using A = std::decay_t<P>;
    static_assert(internal::kValidParameter<P> && Serializable<R>,
                  "ProcessPoolExecutor::map: the parameter and result must be serializable");
    const Deadline deadline = Deadline::after(options.timeout);
    std::vector<Future<ChunkResult<R>>> chunks;
    const std::size_t size =
        internal::split_into_chunks<A>(inputs, options.chunksize, [&](std::vector<A> items) {
          ByteWriter request;
          internal::write_call_header(request, &internal::remote_chunk<R, P>, fn);
          request.write(items);
          auto task =
              std::make_shared<internal::RemoteTask<ChunkResult<R>>>(std::move(request.buffer()));
          chunks.emplace_back(task);
          enqueue(std::move(task));
        });
    return MapResults<R>(std::move(chunks), options.chunksize, size, deadline);
  }

  void enqueue(std::shared_ptr<internal::RemoteTaskBase> task);
  std::unique_ptr<internal::ProcessPoolImpl> impl_;
};

}  // namespace weft
