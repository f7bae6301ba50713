// bench_memory: this machine's memory copy bandwidth, the physical limit that large-message
// collective bandwidth is read against (docs/PERFORMANCE.md). A STREAM-like copy, a[i] = b[i],
// over arrays of 16 MiB (cache-sized on many machines) and 256 MiB (memory), with 1 and 2
// threads each copying its own half. bytes_per_second counts bytes read plus bytes written.
//
//   build/release/bench/bench_memory --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

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
      workers.emplace_back([&, t] { std::memcpy(dst.data() + t * part, src.data() + t * part, part); });
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

}  // namespace

BENCHMARK_MAIN();
