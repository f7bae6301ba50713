// bench_recorder: the flight recorder's cost per operation, what every collective pays for it
// (docs/PERFORMANCE.md): issued() and finished() of one operation on a ring of the process's
// own, with and without a label (FlightRecorder::Site), and a disabled recorder's two calls.
//
//   build/release/bench/bench_recorder --benchmark_repetitions=5
//   --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstddef>
#include <memory>

#include "weft/recorder/flight_recorder.h"

namespace {

using weft::recorder::FlightRecorder;
using weft::recorder::kRingBytes;
using weft::recorder::OpInfo;

void record_ops(benchmark::State& state, FlightRecorder& recorder) {
  OpInfo info{.group = 0, .op = "all_reduce", .count = 1, .reduce = "sum", .started = true};
  for (auto _ : state) {
    ++info.seq;
    recorder.finished(recorder.issued(info), true);
  }
}

void BM_IssuedAndFinished(benchmark::State& state) {
  const std::unique_ptr<std::byte[]> ring(new std::byte[kRingBytes]());
  FlightRecorder recorder(ring.get());
  if (state.range(0) == 0) {
    record_ops(state, recorder);
    return;
  }
  const FlightRecorder::Site site("step 12 / FSDP gather layers.2");
  record_ops(state, recorder);
}
BENCHMARK(BM_IssuedAndFinished)->ArgName("labelled")->Arg(0)->Arg(1);

void BM_Disabled(benchmark::State& state) {
  FlightRecorder recorder(nullptr);
  record_ops(state, recorder);
}
BENCHMARK(BM_Disabled);

}  // namespace

BENCHMARK_MAIN();
