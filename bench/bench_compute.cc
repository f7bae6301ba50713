// bench_compute: what one core computes, the bound that training's speed is read against
// (docs/PERFORMANCE.md, docs/TRAINING.md). Single-threaded throughout; FLOP/s counts a fused
// multiply-add as two.
//   BM_FmaPeak        independent fused multiply-adds on 64-byte vectors: the core's peak
//   BM_Sgemm/n        OpenBLAS's n x n x n sgemm through weft's gemm (the MFU reference)
//   BM_Attention*     weft's causal attention at the debug model's shape (batch 8, sequence
//                     256, 4 heads of 64, fused q|k|v rows); FLOP/s counts the causal pairs
//
//   build/release/bench/bench_compute --benchmark_repetitions=3
//   --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "weft/base/simd.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/blas.h"

namespace {

using Vec [[gnu::vector_size(64)]] = float;
constexpr int kChains = 12;  // FMA latency (4 cycles) x 2 pipes, with room to spare

// kChains independent chains of n multiply-adds each, in the caller's best vector clone.
WEFT_VECTOR_CLONES float fma_chains(std::int64_t n, float m, float c) {
  Vec acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = Vec{} + static_cast<float>(i);
  for (std::int64_t k = 0; k < n; ++k) {
    for (int i = 0; i < kChains; ++i) acc[i] = acc[i] * m + c;
  }
  float sum = 0;
  for (int i = 0; i < kChains; ++i) sum += acc[i][0];
  return sum;
}

void BM_FmaPeak(benchmark::State& state) {
  constexpr std::int64_t kSteps = 1 << 20;
  for (auto _ : state) benchmark::DoNotOptimize(fma_chains(kSteps, 0.999f, 1e-4f));
  const double flops = 2.0 * kChains * (sizeof(Vec) / sizeof(float)) * kSteps;
  state.counters["FLOP/s"] = benchmark::Counter(flops * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FmaPeak);

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

void BM_Sgemm(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto a = random_floats(static_cast<std::size_t>(n * n), 1);
  const auto b = random_floats(a.size(), 2);
  std::vector<float> c(a.size());
  for (auto _ : state) {
    weft::kernels::gemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                               c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * static_cast<double>(n * n * n) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Sgemm)->Arg(256)->Arg(1024);

// The debug model's attention: q|k|v as column blocks of one fused row, as weft-train has it.
struct DebugAttention {
  static constexpr std::int64_t kBatch = 8, kSeq = 256, kHeads = 4, kHeadDim = 64;
  static constexpr std::int64_t kWidth = 3 * kHeads * kHeadDim, kRows = kBatch * kSeq;
  weft::kernels::AttentionShape shape{kBatch, kSeq, kHeads, kHeads, kHeadDim, kWidth};
  std::vector<float> qkv = random_floats(kRows * kWidth, 1);
  std::vector<float> dout = random_floats(kRows * kHeads * kHeadDim, 2);
  std::vector<float> out = std::vector<float>(dout.size());
  std::vector<float> lse = std::vector<float>(kBatch * kHeads * kSeq);
  std::vector<float> dqkv = std::vector<float>(qkv.size());
  const float* q() const { return qkv.data(); }
  const float* k() const { return qkv.data() + kHeads * kHeadDim; }
  const float* v() const { return qkv.data() + 2 * kHeads * kHeadDim; }
  void forward() { weft::kernels::attention_forward(shape, q(), k(), v(), out.data(), lse.data()); }
  void backward() {
    float* dq = dqkv.data();
    weft::kernels::attention_backward(shape, q(), k(), v(), out.data(), dout.data(), lse.data(), dq,
                                      dq + kHeads * kHeadDim, dq + 2 * kHeads * kHeadDim);
  }
  // One product over the causal (query, key) pairs: 2 * head_dim FLOPs per pair.
  static double product_flops() {
    return 2.0 * kHeadDim * static_cast<double>(kSeq * (kSeq + 1) / 2) * kBatch * kHeads;
  }
};

void BM_AttentionForward(benchmark::State& state) {
  DebugAttention a;
  for (auto _ : state) a.forward();
  state.counters["FLOP/s"] = benchmark::Counter(
      2 * DebugAttention::product_flops() * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionForward)->Unit(benchmark::kMillisecond);

// Five products: P recomputed, dV, dP, dQ, dK.
void BM_AttentionBackward(benchmark::State& state) {
  DebugAttention a;
  a.forward();
  for (auto _ : state) a.backward();
  state.counters["FLOP/s"] = benchmark::Counter(
      5 * DebugAttention::product_flops() * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionBackward)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
