// bench_compute: what one core computes, the bound that training's speed is read against
// (docs/PERFORMANCE.md, docs/TRAINING.md). Single-threaded throughout; FLOP/s counts a fused
// multiply-add as two.
//   BM_FmaPeak        independent fused multiply-adds on 64-byte vectors: the core's peak
//   BM_Sgemm/n        OpenBLAS's n x n x n sgemm through weft's gemm (the MFU reference)
//   BM_ScoresTile/i,  one tile product of attention's, unmasked, with the tile's operands in
//   BM_PvTile/i       cache: S = Q K^T (64 x 256 x 64) and P V (64 x 64 x 256), through
//                     OpenBLAS (i = 0) and through weft's own tiles (i = 1)
//   BM_Attention*     weft's causal attention at the debug model's shape (batch 8, sequence
//                     256, 4 heads of 64, fused q|k|v rows); FLOP/s counts the causal pairs
//   BM_PackKeys       one head's keys transposed for the score tiles (256 x 64)
//   BM_Rope           RoPE over the debug model's q and k, in their fused rows
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
#include "weft/kernels/internal/attention_tiles.h"
#include "weft/kernels/internal/vec.h"
#include "weft/kernels/rope.h"

namespace {

using Vec = weft::kernels::internal::Vec<float>;
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

// One head's tile at the debug model's sizes: 64 queries, 256 keys, head_dim 64, q and k rows
// 768 apart (fused q|k|v); no key is masked.
constexpr std::int64_t kTileRows = 64, kTileKeys = 256, kTileDim = 64, kFusedRow = 768;
constexpr std::int64_t kNothingMasked = kTileKeys;  // a diagonal past every column
constexpr double kTileFlops = 2.0 * kTileRows * kTileKeys * kTileDim;

void set_tile_flops(benchmark::State& state) {
  state.counters["FLOP/s"] = benchmark::Counter(
      kTileFlops * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_ScoresTile(benchmark::State& state) {
  const auto q = random_floats(kTileRows * kFusedRow, 1);
  const auto k = random_floats(kTileKeys * kFusedRow, 2);
  std::vector<float> kt(kTileDim * kTileKeys), s(kTileRows * kTileKeys);
  weft::kernels::internal::pack_transposed(k.data(), kFusedRow, kTileKeys, kTileDim, kt.data(),
                                           kTileKeys);
  const float scale = 0.125f;
  for (auto _ : state) {
    if (state.range(0) == 0) {
      weft::kernels::gemm<float>(false, true, kTileRows, kTileKeys, kTileDim, scale, q.data(),
                                 kFusedRow, k.data(), kFusedRow, 0.0f, s.data(), kTileKeys);
    } else {
      weft::kernels::internal::scores_tile(q.data(), kFusedRow, kt.data(), kTileKeys, kTileRows,
                                           kTileKeys, kTileDim, kNothingMasked, scale, s.data(),
                                           kTileKeys);
    }
    benchmark::DoNotOptimize(s.data());
  }
  set_tile_flops(state);
}
BENCHMARK(BM_ScoresTile)->Arg(0)->Arg(1);

void BM_PvTile(benchmark::State& state) {
  const auto p = random_floats(kTileRows * kTileKeys, 1);
  const auto v = random_floats(kTileKeys * kFusedRow, 2);
  std::vector<float> o(kTileRows * kTileDim);
  for (auto _ : state) {
    if (state.range(0) == 0) {
      weft::kernels::gemm<float>(false, false, kTileRows, kTileDim, kTileKeys, 1.0f, p.data(),
                                 kTileKeys, v.data(), kFusedRow, 0.0f, o.data(), kTileDim);
    } else {
      weft::kernels::internal::rows_times_tile(p.data(), kTileKeys, v.data(), kFusedRow, kTileRows,
                                               kTileKeys, kTileDim, kNothingMasked, false,
                                               o.data(), kTileDim);
    }
    benchmark::DoNotOptimize(o.data());
  }
  set_tile_flops(state);
}
BENCHMARK(BM_PvTile)->Arg(0)->Arg(1);

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

// One head's keys transposed into the panel its score tiles read: 256 rows of 64, 768 apart.
void BM_PackKeys(benchmark::State& state) {
  const auto k = random_floats(kTileKeys * kFusedRow, 1);
  std::vector<float> kt(kTileDim * kTileKeys);
  for (auto _ : state) {
    weft::kernels::internal::pack_transposed(k.data(), kFusedRow, kTileKeys, kTileDim, kt.data(),
                                             kTileKeys);
    benchmark::DoNotOptimize(kt.data());
  }
}
BENCHMARK(BM_PackKeys)->Unit(benchmark::kMicrosecond);

// RoPE over the debug model's q and k (8 heads of 64 per fused row of 768), in place; the
// rotation is repeated, so values stay bounded.
void BM_Rope(benchmark::State& state) {
  DebugAttention a;
  for (auto _ : state) {
    weft::kernels::rope_forward(a.qkv.data(), DebugAttention::kBatch, DebugAttention::kSeq,
                                2 * DebugAttention::kHeads, DebugAttention::kHeadDim, 10000.0, 0,
                                DebugAttention::kWidth);
    benchmark::DoNotOptimize(a.qkv.data());
  }
}
BENCHMARK(BM_Rope)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
