// bench_memory: this machine's memory copy bandwidth, the physical limit that large-message
// collective bandwidth is read against (docs/PERFORMANCE.md). A STREAM-like copy, a[i] = b[i],
// over arrays of 16 MiB (cache-sized on many machines) and 256 MiB (memory), with 1 and 2
// threads each copying its own half. bytes_per_second counts bytes read plus bytes written.
// And the bound for mid-sized broadcasts, whose receivers copy what another core has just
// written (BM_CopyFromOtherCore): bytes_per_second there counts the bytes copied, as busbw.
//
//   build/release/bench/bench_memory --benchmark_repetitions=5
//   --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace {

void BM_Copy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0)) << 20;
  const auto threads = static_cast<std::size_t>(state.range(1));
  std::vector<char> src(bytes, 1);
  std::vector<char> dst(bytes, 0);
  const std::size_t part = bytes / threads;
  for (auto _ : state) {
    std::vector<std::thread> workers;
    for (std::size_t t = 1; t < threads; ++t) {
      workers.emplace_back(
          [&, t] { std::memcpy(dst.data() + t * part, src.data() + t * part, part); });
    }
    std::memcpy(dst.data(), src.data(), part);
    for (auto& w : workers) w.join();
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes * 2));
}

BENCHMARK(BM_Copy)
    ->ArgNames({"MiB", "threads"})
    ->Args({16, 1})
    ->Args({16, 2})
    ->Args({256, 1})
    ->Args({256, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A writer thread rewrites `shared` from its own buffer before every iteration, so the data
// sits in the writer's core's cache; only the reader's copy out of it is timed. Both threads
// spin between turns, so each keeps a core (run it on an otherwise idle machine).
void BM_CopyFromOtherCore(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0)) << 10;
  std::vector<char> src(bytes, 1), shared(bytes, 0), dst(bytes, 0);
  enum Turn { kWrite, kRead, kStop };
  std::atomic<int> turn{kWrite};
  std::thread writer([&] {
    for (;;) {
      int t;
      while ((t = turn.load(std::memory_order_acquire)) == kRead) {
      }
      if (t == kStop) return;
      std::memcpy(shared.data(), src.data(), bytes);
      turn.store(kRead, std::memory_order_release);
    }
  });
  for (auto _ : state) {
    while (turn.load(std::memory_order_acquire) != kRead) {
    }
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), shared.data(), bytes);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    state.SetIterationTime(took.count());
    benchmark::DoNotOptimize(dst.data());
    turn.store(kWrite, std::memory_order_release);
  }
  while (turn.load(std::memory_order_acquire) != kRead) {  // the writer's last round
  }
  turn.store(kStop, std::memory_order_release);
  writer.join();
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

BENCHMARK(BM_CopyFromOtherCore)
    ->ArgName("KiB")
    ->Arg(64)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

}  // namespace

BENCHMARK_MAIN();
