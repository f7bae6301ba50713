// bench_executor: the cost of handing tiny tasks to weft::ThreadPoolExecutor, side by side
// with its peers, all with 2 worker threads:
//
//   Weft      weft::ThreadPoolExecutor(2): per-worker queues with stealing, weft::Future
//   Async     std::async(std::launch::async, ...): a new thread per task (run at a smaller N)
//   Tbb       oneTBB tbb::task_group run inside a tbb::task_arena(2). Note: the arena's
//             concurrency of 2 counts the calling thread, which also runs tasks in wait(),
//             so TBB has 1 worker + the benchmark thread (the others: 2 workers + it)
//   MutexCv   MutexCvPool below: one std::deque<std::function<void()>> under one mutex and
//             a condition variable, std::packaged_task futures (the classic baseline)
//
// Four groups of measurements, each reporting items_per_second:
//   BM_Throughput_*  submit N tasks `return x` one by one, then wait for all of them
//   BM_Latency_*     one submit -> result round trip at a time
//   BM_Map_Weft      pool.map over 1,000,000 ints at chunksize 1, 1000 and 10000
//   BM_ProcessPool_* the same three for weft::ProcessPoolExecutor(2)
//
// Run (about a minute):
//   cmake --build build/release --target bench_executor
//   build/release/bench/bench_executor --benchmark_min_time=0.1
//   build/release/bench/bench_executor --benchmark_filter=Throughput   # one group
#include <benchmark/benchmark.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "weft/exec/future.h"
#include "weft/exec/map.h"
#include "weft/exec/process_pool.h"
#include "weft/exec/thread_pool.h"

namespace {

constexpr int kWorkers = 2;
constexpr std::int64_t kTasks = 1'000'000;
constexpr std::int64_t kAsyncTasks = 20'000;  // a thread per task: 1M would take minutes
constexpr std::int64_t kMapInputs = 1'000'000;

// The task every benchmark runs: as cheap as possible, so what is measured is overhead.
int identity(int x) { return x; }

// 0 + 1 + ... + (n - 1): what summing the results of identity over 0..n-1 must give.
std::int64_t expected_sum(std::int64_t n) { return n * (n - 1) / 2; }

// Marks the run as failed (instead of reporting a fast wrong answer) when results are lost.
void check_sum(benchmark::State& state, std::int64_t sum, std::int64_t n) {
  benchmark::DoNotOptimize(sum);
  if (sum != expected_sum(n)) state.SkipWithError("wrong sum of task results");
}

// The classic thread pool: one locked queue, one condition variable, futures from
// std::packaged_task. The destructor runs every queued task, then joins the threads.
class MutexCvPool {
 public:
  explicit MutexCvPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
  }
  ~MutexCvPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  MutexCvPool(const MutexCvPool&) = delete;
  MutexCvPool& operator=(const MutexCvPool&) = delete;

  template <class F>
  std::future<std::invoke_result_t<F&>> submit(F f) {
    // std::function needs a copyable callable, and packaged_task is move-only.
    auto task = std::make_shared<std::packaged_task<std::invoke_result_t<F&>()>>(std::move(f));
    auto future = task->get_future();
    {
      std::lock_guard lock(mu_);
      tasks_.emplace_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return future;
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stop_ and drained
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// ---------------------------------------------------------------------------------------
// 1. Throughput: N tasks submitted one by one from this thread, then all awaited.
// ---------------------------------------------------------------------------------------

// Submits n identity tasks through `submit`, keeping the futures, then sums their get().
template <class Future, class Submit>
std::int64_t submit_all_then_get(std::int64_t n, Submit submit) {
  std::vector<Future> futures;
  futures.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) futures.push_back(submit(i));
  std::int64_t sum = 0;
  for (Future& f : futures) sum += f.get();
  return sum;
}

// range(1) is the number of workers: 2 (the comparison), and 1, which like TBB's arena of 2
// leaves one core to the submitting thread.
void BM_Throughput_Weft(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  weft::ThreadPoolExecutor pool(static_cast<std::size_t>(state.range(1)));
  for (auto _ : state) {
    const std::int64_t sum = submit_all_then_get<weft::Future<int>>(
        n, [&pool](int i) { return pool.submit([i] { return identity(i); }); });
    check_sum(state, sum, n);
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_Throughput_Async(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  for (auto _ : state) {
    try {
      const std::int64_t sum = submit_all_then_get<std::future<int>>(
          n, [](int i) { return std::async(std::launch::async, [i] { return identity(i); }); });
      check_sum(state, sum, n);
    } catch (const std::system_error& e) {
      state.SkipWithError(e.what());  // out of threads; the futures already joined theirs
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// range(1) is the arena's concurrency: 2 = one TBB worker + the caller (which runs tasks
// in wait()), 3 = two TBB workers + the caller, the same thread count as weft's pool.
void BM_Throughput_Tbb(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  tbb::task_arena arena(static_cast<int>(state.range(1)));
  tbb::task_group group;
  for (auto _ : state) {
    std::vector<int> results(static_cast<std::size_t>(n));
    arena.execute([&] {
      for (int i = 0; i < n; ++i) group.run([&results, i] { results[i] = identity(i); });
      group.wait();
    });
    check_sum(state, std::accumulate(results.begin(), results.end(), std::int64_t{0}), n);
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_Throughput_MutexCv(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  MutexCvPool pool(kWorkers);
  for (auto _ : state) {
    const std::int64_t sum = submit_all_then_get<std::future<int>>(
        n, [&pool](int i) { return pool.submit([i] { return identity(i); }); });
    check_sum(state, sum, n);
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// Each iteration is a whole batch of N; a few batches are enough for a stable rate.
void throughput_args(benchmark::internal::Benchmark* b, std::int64_t n) {
  b->ArgName("n")->Arg(n)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_Throughput_Weft)
    ->ArgNames({"n", "workers"})
    ->Args({kTasks, kWorkers})
    ->Args({kTasks, 1})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Throughput_Async)->Apply([](auto* b) { throughput_args(b, kAsyncTasks); });
BENCHMARK(BM_Throughput_Tbb)
    ->ArgNames({"n", "arena"})
    ->Args({kTasks, kWorkers})
    ->Args({kTasks, kWorkers + 1})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Throughput_MutexCv)->Apply([](auto* b) { throughput_args(b, kTasks); });

// ---------------------------------------------------------------------------------------
// 2. Latency: one task at a time, submit -> result. Workers are started before timing.
// ---------------------------------------------------------------------------------------

void BM_Latency_Weft(benchmark::State& state) {
  weft::ThreadPoolExecutor pool(kWorkers);
  const auto round_trip = [&pool](int i) { return pool.submit([i] { return identity(i); }).get(); };
  round_trip(0);
  int i = 0;
  for (auto _ : state) {
    int result = round_trip(i++);
    benchmark::DoNotOptimize(result);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Latency_Tbb(benchmark::State& state) {
  tbb::task_arena arena(kWorkers);
  tbb::task_group group;
  arena.execute([&] {
    int i = 0;
    int result = 0;
    for (auto _ : state) {
      group.run([&result, i] { result = identity(i); });
      group.wait();
      benchmark::DoNotOptimize(result);
      ++i;
    }
  });
  state.SetItemsProcessed(state.iterations());
}

// A true hand-off to a TBB worker thread: BM_Latency_Tbb's wait() runs the task on the
// calling thread, so it measures queueing, not a round trip between threads.
void BM_Latency_TbbEnqueue(benchmark::State& state) {
  tbb::task_arena arena(kWorkers);
  std::atomic<int> done{0};
  int i = 0;
  for (auto _ : state) {
    arena.enqueue([&done, i] {
      benchmark::DoNotOptimize(identity(i));
      done.store(1, std::memory_order_release);
      done.notify_one();
    });
    done.wait(0, std::memory_order_acquire);
    done.store(0, std::memory_order_relaxed);
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Latency_MutexCv(benchmark::State& state) {
  MutexCvPool pool(kWorkers);
  const auto round_trip = [&pool](int i) { return pool.submit([i] { return identity(i); }).get(); };
  round_trip(0);
  int i = 0;
  for (auto _ : state) {
    int result = round_trip(i++);
    benchmark::DoNotOptimize(result);
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_Latency_Weft)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Latency_Tbb)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Latency_TbbEnqueue)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Latency_MutexCv)->Unit(benchmark::kMicrosecond)->UseRealTime();

// ---------------------------------------------------------------------------------------
// 3. weft's map: 1,000,000 ints, results read back in order and summed.
// ---------------------------------------------------------------------------------------

// pool.map over kMapInputs ints at chunksize range(0), results summed in order; both pools.
template <class Pool>
void map_benchmark(benchmark::State& state) {
  const auto chunksize = static_cast<std::size_t>(state.range(0));
  std::vector<int> inputs(static_cast<std::size_t>(kMapInputs));
  std::iota(inputs.begin(), inputs.end(), 0);
  Pool pool(kWorkers);
  for (auto _ : state) {
    const auto results = pool.map(
        identity, inputs, weft::MapOptions{.timeout = std::nullopt, .chunksize = chunksize});
    std::int64_t sum = 0;
    for (int r : results) sum += r;
    check_sum(state, sum, kMapInputs);
  }
  state.SetItemsProcessed(state.iterations() * kMapInputs);
}

void BM_Map_Weft(benchmark::State& state) { map_benchmark<weft::ThreadPoolExecutor>(state); }

BENCHMARK(BM_Map_Weft)
    ->ArgName("chunksize")
    ->Arg(1)
    ->Arg(1000)
    ->Arg(10000)
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

// =======================================================================================
// 4. ProcessPoolExecutor: the same measurements across a process boundary (a socket write
//    and read each way per task). Python's concurrent.futures numbers, for comparison, come
//    from bench/peers/concurrent_futures.py.
// =======================================================================================

constexpr std::int64_t kProcessTasks = 20'000;

void BM_ProcessPool_Latency(benchmark::State& state) {
  weft::ProcessPoolExecutor pool(kWorkers);
  int i = 0;
  for (auto _ : state) {
    int result = pool.submit(identity, i++).get();
    benchmark::DoNotOptimize(result);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_ProcessPool_Throughput(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  weft::ProcessPoolExecutor pool(kWorkers);
  for (auto _ : state) {
    const std::int64_t sum = submit_all_then_get<weft::Future<int>>(
        n, [&pool](int i) { return pool.submit(identity, i); });
    check_sum(state, sum, n);
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_ProcessPool_Map(benchmark::State& state) {
  map_benchmark<weft::ProcessPoolExecutor>(state);
}

BENCHMARK(BM_ProcessPool_Latency)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ProcessPool_Throughput)->Apply([](auto* b) { throughput_args(b, kProcessTasks); });
BENCHMARK(BM_ProcessPool_Map)
    ->ArgName("chunksize")
    ->Arg(1000)
    ->Arg(10000)
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
