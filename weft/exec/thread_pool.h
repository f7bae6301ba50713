// weft::ThreadPoolExecutor: runs callables on a pool of threads and returns futures, with
// the behaviour of Python's concurrent.futures.ThreadPoolExecutor.
//
//   weft::ThreadPoolExecutor pool(4);
//   weft::Future<int> f = pool.submit([](int x) { return x * x; }, 7);
//   int y = f.get();  // 49
//
// Workers start lazily, one per submit that finds no idle worker, up to max_workers. Each
// worker has its own queue; submits spread over the queues and idle workers steal from the
// others, so there is no global lock on the submit/run path (docs/EXECUTORS.md).
//
// Thread-safety: every member function may be called from any thread, concurrently.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <ranges>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "weft/exec/future.h"
#include "weft/exec/map.h"

namespace weft {

struct ExecutorOptions {
  // Worker threads are named "<prefix>_<index>" (truncated to Linux's 15 characters).
  // Empty: "weft-pool<N>", N counting executors.
  std::string thread_name_prefix;
  // Run once in each worker before its first task. If it throws, the pool is broken:
  // queued tasks fail and later submits throw weft::BrokenExecutor.
  std::function<void()> initializer;
  // How long an idle worker keeps polling for work (yielding now and then) before it sleeps,
  // beyond the short default poll. For pools fed by back-to-back parallel loops, as weft's
  // kernels' pool is, whose workers would otherwise sleep in every gap and wake (tens of
  // microseconds here) after the caller has started on its own share.
  std::chrono::microseconds idle_spin{0};
};

namespace internal {
class ThreadPoolImpl;
}

class ThreadPoolExecutor {
 public:
  // max_workers = 0 means min(32, available cores + 4), as in Python.
  explicit ThreadPoolExecutor(std::size_t max_workers = 0, ExecutorOptions options = {});
  // Shuts down with wait = true: runs every queued task and joins the workers.
  ~ThreadPoolExecutor();
  ThreadPoolExecutor(const ThreadPoolExecutor&) = delete;
  ThreadPoolExecutor& operator=(const ThreadPoolExecutor&) = delete;

  // Schedules f(args...) (both copied or moved into the task) and returns its future.
  // Throws weft::ExecutorShutdown after shutdown() and weft::BrokenExecutor if a worker's
  // initializer failed. Never blocks on running tasks.
  template <class F, class... Args>
  [[nodiscard]] auto submit(F&& f, Args&&... args) {
    using R = std::invoke_result_t<std::decay_t<F>&, std::decay_t<Args>&...>;
    auto bound = [fn = std::forward<F>(f),
                  tuple = std::make_tuple(std::forward<Args>(args)...)]() mutable -> R {
      return std::apply(fn, tuple);
    };
    auto task = std::make_shared<internal::TaskState<R, decltype(bound)>>(std::move(bound));
    Future<R> future(task);
    enqueue(std::move(task));
    return future;
  }

  // Applies f to every element of `inputs` (copied into the tasks), `chunksize` elements
  // per task. The results come back in input order (see MapResults); all tasks are
  // submitted before map returns.
  template <class F, std::ranges::input_range Range>
  [[nodiscard]] auto map(F f, const Range& inputs, MapOptions options = {}) {
    using A = std::ranges::range_value_t<Range>;
    using R = std::decay_t<std::invoke_result_t<F&, const A&>>;
    static_assert(!std::is_void_v<R>, "map needs a function that returns a value");
    const Deadline deadline = Deadline::after(options.timeout);
    std::vector<Future<ChunkResult<R>>> chunks;
    const std::size_t size =
        internal::split_into_chunks<A>(inputs, options.chunksize, [&](std::vector<A> items) {
          chunks.push_back(submit(
              [f](const std::vector<A>& chunk) {
                ChunkResult<R> out;
                out.values.reserve(chunk.size());
                try {
                  for (const A& item : chunk) out.values.push_back(f(item));
                } catch (...) {
                  out.error = std::current_exception();
                }
                return out;
              },
              std::move(items)));
        });
    return MapResults<R>(std::move(chunks), options.chunksize, size, deadline);
  }

  // Stops accepting work. cancel_futures cancels every task that has not started.
  // wait = true blocks until all started (and, without cancel_futures, all queued) tasks
  // have finished and the workers have exited; wait = false returns at once and the
  // workers finish the queue in the background. Idempotent.
  void shutdown(bool wait = true, bool cancel_futures = false);

  std::size_t max_workers() const;
  // Worker threads started so far (never more than max_workers()).
  std::size_t num_threads() const;

 private:
  void enqueue(std::shared_ptr<internal::Runnable> task);
  std::unique_ptr<internal::ThreadPoolImpl> impl_;
};

}  // namespace weft
