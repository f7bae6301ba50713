// bench_compute: what one core computes, the bound that training's speed is read against
// (docs/PERFORMANCE.md, docs/TRAINING.md). Single-threaded throughout; FLOP/s counts a fused
// multiply-add as two. Every benchmark of weft's vector code runs once per vector target this
// CPU has, named <benchmark>/<target>/<arg> (BM_ScoresTile/AVX2/1); WEFT_SIMD_TARGET=AVX2 runs
// that target only. BM_Matmul, BM_OpenBlasSgemm and BM_Linear time the libraries' products,
// which dispatch themselves, once.
//   BM_FmaPeak        independent fused multiply-adds on the target's vectors: its peak
//   BM_Matmul/n/t     oneDNN's n x n x n product through weft's gemm, float32 (t = 0) or
//                     bfloat16 operands with float32 accumulation (t = 1)
//   BM_OpenBlasSgemm/n  the same float32 product through OpenBLAS's cblas_sgemm (the peer)
//   BM_WeightLayout/l/t  oneDNN straight (no weft), Linear's forward at the debug model's
//                     w1|w3 shape (512 rows, 256 -> 1408), weights plain (l = 0) or in the
//                     blocked layout oneDNN asks for (l = 1, reordered once, outside the
//                     timing), float32 (t = 0) or bfloat16 (t = 1)
//   BM_ScoresTile/i,  one tile product of attention's, unmasked, with the tile's operands in
//   BM_PvTile/i       cache: S = Q K^T (64 x 256 x 64) and P V (64 x 64 x 256), through
//                     oneDNN (i = 0) and through weft's own tiles (i = 1)
//   BM_Attention*/t   weft's causal attention at the debug model's shape (batch 8, sequence
//                     256, 4 heads of 64, fused q|k|v rows), float32 (t = 0) or on bfloat16
//                     q|k|v (t = 1, mixed precision's); FLOP/s counts the causal pairs
//   BM_Linear/i       the debug model's q|k|v projection (2048 tokens, 256 -> 768), forward
//                     and backward: weft's linear_* in fixed blocks of rows (i = 0), against
//                     the same three products as one call each (i = 1), and linear_* in
//                     bfloat16 (i = 2)
//   BM_LinearBF16/i   llama_512's w1|w3 Linear (2048 tokens, 512 -> 2752), forward and dx, in
//                     bfloat16 from the float32 weight: rounded to a row-major bf16 copy
//                     first (i = 0), or rounded and packed into oneDNN's layout by the
//                     product, once per call (i = 1, what Linear runs)
//   BM_PackKeys       one head's keys transposed for the score tiles (256 x 64)
//   BM_Rope           RoPE over the debug model's q and k, in their fused rows
//   BM_RmsNorm/t      RMSNorm's forward and SwiGLU's forward and backward at llama_512's
//   BM_Swiglu/t       shapes (2048 rows of 512; of 2 x 1408), writing float32 (t = 0), the
//                     bfloat16 the products read in mixed precision, from w1|w3's bfloat16
//                     output (t = 1), or float32 then rounded to bfloat16 in a second pass
//                     (t = 2)
//
//   build/release/bench/bench_compute --benchmark_repetitions=3
//   --benchmark_report_aggregates_only=true
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/bench_compute.cc"
#include <cstddef>
#include <cstdint>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#ifndef BENCH_COMPUTE_CHAINS
#define BENCH_COMPUTE_CHAINS
namespace {
constexpr int kChains = 12;  // FMA latency (4 cycles) x 2 pipes, with room to spare
}  // namespace
#endif

HWY_BEFORE_NAMESPACE();
namespace bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// kChains independent chains of n multiply-adds each on the target's vectors; returns a sum
// (so that nothing is optimised away) and the lanes per vector.
float FmaChains(std::int64_t n, float m, float c, std::size_t* lanes) {
  const hn::ScalableTag<float> d;
  hn::Vec<decltype(d)> acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = hn::Set(d, static_cast<float>(i));
  const auto mv = hn::Set(d, m), cv = hn::Set(d, c);
  for (std::int64_t k = 0; k < n; ++k) {
    for (int i = 0; i < kChains; ++i) acc[i] = hn::MulAdd(acc[i], mv, cv);
  }
  float sum = 0;
  for (int i = 0; i < kChains; ++i) sum += hn::GetLane(acc[i]);
  *lanes = hn::Lanes(d);
  return sum;
}

}  // namespace bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <cstdlib>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <vector>

#include "weft/base/simd.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/convert.h"
#include "weft/kernels/internal/attention_tiles.h"
#include "weft/kernels/matmul.h"
#include "weft/kernels/rmsnorm.h"
#include "weft/kernels/rope.h"
#include "weft/kernels/swiglu.h"

namespace bench {
HWY_EXPORT(FmaChains);
}  // namespace bench

namespace {

void BM_FmaPeak(benchmark::State& state) {
  constexpr std::int64_t kSteps = 1 << 20;
  std::size_t lanes = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(HWY_DYNAMIC_DISPATCH(bench::FmaChains)(kSteps, 0.999f, 1e-4f, &lanes));
  const double flops = 2.0 * kChains * static_cast<double>(lanes) * kSteps;
  state.counters["FLOP/s"] = benchmark::Counter(flops * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
}

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

double product_flops(std::int64_t m, std::int64_t n, std::int64_t k, benchmark::State& state) {
  return 2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations());
}

void BM_Matmul(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto a = random_floats(static_cast<std::size_t>(n * n), 1);
  const auto b = random_floats(a.size(), 2);
  const std::vector<weft::BFloat16> a16(a.begin(), a.end()), b16(b.begin(), b.end());
  std::vector<float> c(a.size());
  for (auto _ : state) {
    if (state.range(1) == 0) {
      weft::kernels::gemm<float>(false, false, n, n, n, 1, a.data(), n, b.data(), n, 0, c.data(),
                                 n);
    } else {
      weft::kernels::gemm<weft::BFloat16>(false, false, n, n, n, 1, a16.data(), n, b16.data(), n, 0,
                                          c.data(), n);
    }
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(product_flops(n, n, n, state), benchmark::Counter::kIsRate);
  state.SetLabel(weft::kernels::matmul_isa(state.range(1) == 0 ? weft::DType::kFloat32
                                                               : weft::DType::kBFloat16));
}

void BM_WeightLayout(benchmark::State& state) {
  using dnnl::memory;
  constexpr std::int64_t kRows = 512, kIn = 256, kOut = 1408;
  const auto type = state.range(1) == 0 ? memory::data_type::f32 : memory::data_type::bf16;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  omp_set_num_threads(1);
  const memory::desc x_desc({kRows, kIn}, type, memory::dims{kIn, 1});
  const memory::desc w_plain({kIn, kOut}, type, memory::dims{1, kIn});  // W (out, in), read as W^T
  const memory::desc y_desc({kRows, kOut}, memory::data_type::f32, memory::dims{kOut, 1});
  const memory::desc w_any({kIn, kOut}, type, memory::format_tag::any);
  const dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(x_desc, state.range(0) == 0 ? w_plain : w_any, y_desc), engine);
  std::vector<std::uint32_t> x(kRows * kIn, 0x3f003f00u), w(kIn * kOut, 0x3e803e80u);
  std::vector<float> y(kRows * kOut);
  memory x_mem(x_desc, engine, x.data()), y_mem(y_desc, engine, y.data());
  memory w_mem(w_plain, engine, w.data());
  if (state.range(0) == 1) {
    memory blocked(pd.weights_desc(), engine);
    dnnl::reorder(w_mem, blocked).execute(stream, w_mem, blocked);
    w_mem = blocked;
  }
  const dnnl::matmul product(pd);
  for (auto _ : state) {
    product.execute(stream,
                    {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DST, y_mem}});
    stream.wait();
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(product_flops(kRows, kOut, kIn, state), benchmark::Counter::kIsRate);
}

void BM_OpenBlasSgemm(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto a = random_floats(static_cast<std::size_t>(n * n), 1);
  const auto b = random_floats(a.size(), 2);
  std::vector<float> c(a.size());
  openblas_set_num_threads(1);
  const auto size = static_cast<blasint>(n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, size, size, size, 1, a.data(), size,
                b.data(), size, 0, c.data(), size);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(product_flops(n, n, n, state), benchmark::Counter::kIsRate);
}

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
                                               kTileKeys, kTileDim, kNothingMasked, false, o.data(),
                                               kTileDim);
    }
    benchmark::DoNotOptimize(o.data());
  }
  set_tile_flops(state);
}

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
  std::vector<weft::BFloat16> qkv16 = std::vector<weft::BFloat16>(qkv.begin(), qkv.end());
  std::vector<weft::BFloat16> out16;  // the output rounded, as the model keeps it
  template <class T>
  static const T* heads(const std::vector<T>& rows, int part) {
    return rows.data() + part * kHeads * kHeadDim;
  }
  void forward(bool bf16) {
    if (bf16) {
      weft::kernels::attention_forward(shape, heads(qkv16, 0), heads(qkv16, 1), heads(qkv16, 2),
                                       out.data(), lse.data());
    } else {
      weft::kernels::attention_forward(shape, heads(qkv, 0), heads(qkv, 1), heads(qkv, 2),
                                       out.data(), lse.data());
    }
  }
  void backward(bool bf16) {
    float* dq = dqkv.data();
    float* dk = dq + kHeads * kHeadDim;
    float* dv = dk + kHeads * kHeadDim;
    if (bf16) {
      weft::kernels::attention_backward(shape, heads(qkv16, 0), heads(qkv16, 1), heads(qkv16, 2),
                                        out16.data(), dout.data(), lse.data(), dq, dk, dv);
    } else {
      weft::kernels::attention_backward(shape, heads(qkv, 0), heads(qkv, 1), heads(qkv, 2),
                                        out.data(), dout.data(), lse.data(), dq, dk, dv);
    }
  }
  // One product over the causal (query, key) pairs: 2 * head_dim FLOPs per pair.
  static double product_flops() {
    return 2.0 * kHeadDim * static_cast<double>(kSeq * (kSeq + 1) / 2) * kBatch * kHeads;
  }
};

void BM_AttentionForward(benchmark::State& state) {
  DebugAttention a;
  for (auto _ : state) a.forward(state.range(0) == 1);
  state.counters["FLOP/s"] = benchmark::Counter(
      2 * DebugAttention::product_flops() * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

// Five products: P recomputed, dV, dP, dQ, dK.
void BM_AttentionBackward(benchmark::State& state) {
  DebugAttention a;
  a.forward(state.range(0) == 1);
  a.out16 = std::vector<weft::BFloat16>(a.out.begin(), a.out.end());
  for (auto _ : state) a.backward(state.range(0) == 1);
  state.counters["FLOP/s"] = benchmark::Counter(
      5 * DebugAttention::product_flops() * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void BM_Linear(benchmark::State& state) {
  constexpr std::int64_t kRows = 2048, kIn = 256, kOut = 768;
  const auto x = random_floats(kRows * kIn, 1), w = random_floats(kOut * kIn, 2);
  const auto dy = random_floats(kRows * kOut, 3);
  const std::vector<weft::BFloat16> x16(x.begin(), x.end()), w16(w.begin(), w.end()),
      dy16(dy.begin(), dy.end());
  std::vector<float> y(kRows * kOut), dx(kRows * kIn), dw(kOut * kIn);
  using weft::kernels::gemm;
  using weft::kernels::linear_backward;
  using weft::kernels::linear_forward;
  for (auto _ : state) {
    if (state.range(0) == 0) {
      linear_forward(x.data(), w.data(), y.data(), kRows, kIn, kOut);
      linear_backward(dy.data(), x.data(), w.data(), dx.data(), dw.data(), kRows, kIn, kOut);
    } else if (state.range(0) == 1) {
      gemm<float>(false, true, kRows, kOut, kIn, 1, x.data(), kIn, w.data(), kIn, 0, y.data(),
                  kOut);
      gemm<float>(false, false, kRows, kIn, kOut, 1, dy.data(), kOut, w.data(), kIn, 0, dx.data(),
                  kIn);
      gemm<float>(true, false, kOut, kIn, kRows, 1, dy.data(), kOut, x.data(), kIn, 1, dw.data(),
                  kIn);
    } else {
      linear_forward(x16.data(), w16.data(), y.data(), kRows, kIn, kOut);
      linear_backward(dy16.data(), x16.data(), w16.data(), dx.data(), dw.data(), kRows, kIn, kOut);
    }
    benchmark::DoNotOptimize(dw.data());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(3 * product_flops(kRows, kIn, kOut, state), benchmark::Counter::kIsRate);
}

void BM_LinearBF16(benchmark::State& state) {
  constexpr std::int64_t kRows = 2048, kIn = 512, kOut = 2752;
  const auto x = random_floats(kRows * kIn, 1), w = random_floats(kOut * kIn, 2);
  const auto dy = random_floats(kRows * kOut, 3);
  const std::vector<weft::BFloat16> x16(x.begin(), x.end()), dy16(dy.begin(), dy.end());
  std::vector<weft::BFloat16> w16(w.size());
  std::vector<float> y(kRows * kOut), dx(kRows * kIn);
  namespace k = weft::kernels;
  for (auto _ : state) {
    if (state.range(0) == 0) {
      k::to_bfloat16(w.data(), w16.data(), kOut * kIn);
      k::linear_forward(x16.data(), w16.data(), y.data(), kRows, kIn, kOut);
      k::to_bfloat16(w.data(), w16.data(), kOut * kIn);
      k::linear_backward<weft::BFloat16>(dy16.data(), nullptr, w16.data(), dx.data(), nullptr,
                                         kRows, kIn, kOut);
    } else {
      k::linear_forward(x16.data(), w.data(), y.data(), kRows, kIn, kOut);
      k::linear_backward_input(dy16.data(), w.data(), dx.data(), kRows, kIn, kOut);
    }
    benchmark::DoNotOptimize(dx.data());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2 * product_flops(kRows, kIn, kOut, state), benchmark::Counter::kIsRate);
}

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

// The element-wise kernels around llama_512's products (2048 rows), writing float32 (t = 0) or
// the bfloat16 that mixed precision's products read (t = 1).
constexpr std::int64_t kLlamaRows = 2048, kLlamaDim = 512, kLlamaHidden = 1408;

void BM_RmsNorm(benchmark::State& state) {
  const auto x = random_floats(kLlamaRows * kLlamaDim, 1), w = random_floats(kLlamaDim, 2);
  std::vector<float> y(x.size()), rstd(kLlamaRows);
  std::vector<weft::BFloat16> y16(x.size());
  for (auto _ : state) {
    if (state.range(0) == 1) {
      weft::kernels::rmsnorm_forward(x.data(), w.data(), y16.data(), rstd.data(), kLlamaRows,
                                     kLlamaDim, 1e-5);
    } else {
      weft::kernels::rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), kLlamaRows,
                                     kLlamaDim, 1e-5);
      if (state.range(0) == 2)
        weft::kernels::to_bfloat16(y.data(), y16.data(), kLlamaRows * kLlamaDim);
    }
    benchmark::DoNotOptimize(rstd.data());
  }
}

// Forward and backward of w1|w3's fused rows [a | b]; the float32 backward overwrites a and b,
// the bf16 one dh: each iteration starts from copies made outside the timing.
void BM_Swiglu(benchmark::State& state) {
  const auto ab = random_floats(kLlamaRows * 2 * kLlamaHidden, 1),
             dh = random_floats(kLlamaRows * kLlamaHidden, 2);
  std::vector<float> h(dh.size()), ab_work, dh_work;
  const std::vector<weft::BFloat16> ab16(ab.begin(), ab.end());  // w1|w3's bf16 output
  std::vector<weft::BFloat16> h16(dh.size());
  const bool bf16 = state.range(0) == 1;
  for (auto _ : state) {
    state.PauseTiming();
    ab_work = ab;
    dh_work = dh;
    state.ResumeTiming();
    float* a = ab_work.data();
    if (bf16) {
      const weft::BFloat16* a16 = ab16.data();
      weft::kernels::swiglu_forward(a16, a16 + kLlamaHidden, h16.data(), kLlamaRows, kLlamaHidden,
                                    2 * kLlamaHidden);
      benchmark::DoNotOptimize(weft::kernels::swiglu_backward_bf16(
          dh_work.data(), a16, a16 + kLlamaHidden, kLlamaRows, kLlamaHidden, 2 * kLlamaHidden));
    } else {
      weft::kernels::swiglu_forward(a, a + kLlamaHidden, h.data(), kLlamaRows, kLlamaHidden,
                                    2 * kLlamaHidden);
      weft::kernels::swiglu_backward(dh_work.data(), a, a + kLlamaHidden, kLlamaRows, kLlamaHidden,
                                     2 * kLlamaHidden);
      if (state.range(0) == 2) {  // what the products read, rounded afterwards
        weft::kernels::to_bfloat16(h.data(), h16.data(), kLlamaRows * kLlamaHidden);
        weft::kernels::to_bfloat16(a, reinterpret_cast<weft::BFloat16*>(dh_work.data()),
                                   kLlamaRows * 2 * kLlamaHidden);
      }
    }
    benchmark::DoNotOptimize(a);
  }
}

struct Registration {
  const char* name;
  void (*run)(benchmark::State&);
  std::function<void(benchmark::internal::Benchmark*)> configure;
  bool per_target = true;  // false: the libraries' products, which dispatch themselves: once
};

const std::vector<Registration>& benchmarks() {
  auto us = [](benchmark::internal::Benchmark* b) { b->Unit(benchmark::kMicrosecond); };
  auto both = [](benchmark::internal::Benchmark* b) { b->Arg(0)->Arg(1); };
  auto us_three = [](benchmark::internal::Benchmark* b) {
    b->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);
  };
  auto ms_both = [](benchmark::internal::Benchmark* b) {
    b->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
  };
  static const std::vector<Registration> all = {
      {"BM_FmaPeak", BM_FmaPeak, [](benchmark::internal::Benchmark*) {}},
      {"BM_Matmul", BM_Matmul,
       [](benchmark::internal::Benchmark* b) {
         b->ArgsProduct({{256, 1024}, {0, 1}});
       },
       false},
      {"BM_WeightLayout", BM_WeightLayout,
       [](benchmark::internal::Benchmark* b) {
         b->ArgsProduct({{0, 1}, {0, 1}});
       },
       false},
      {"BM_OpenBlasSgemm", BM_OpenBlasSgemm,
       [](benchmark::internal::Benchmark* b) { b->Arg(256)->Arg(1024); }, false},
      {"BM_ScoresTile", BM_ScoresTile, both},
      {"BM_PvTile", BM_PvTile, both},
      {"BM_AttentionForward", BM_AttentionForward, ms_both},
      {"BM_AttentionBackward", BM_AttentionBackward, ms_both},
      {"BM_Linear", BM_Linear,
       [](benchmark::internal::Benchmark* b) {
         b->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
       },
       false},
      {"BM_LinearBF16", BM_LinearBF16,
       [](benchmark::internal::Benchmark* b) { b->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond); },
       false},
      {"BM_PackKeys", BM_PackKeys, us},
      {"BM_Rope", BM_Rope, us},
      {"BM_RmsNorm", BM_RmsNorm, us_three},
      {"BM_Swiglu", BM_Swiglu, us_three},
  };
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const char* only = std::getenv("WEFT_SIMD_TARGET");
  const std::vector<std::string> targets = only != nullptr && *only != '\0'
                                               ? std::vector<std::string>{only}
                                               : weft::simd::supported_targets();
  for (const std::string& target : targets) {
    weft::simd::ScopedTarget check(target);  // throws, naming the supported ones, if unknown
    for (const Registration& r : benchmarks()) {
      if (!r.per_target) continue;
      auto run = r.run;
      r.configure(benchmark::RegisterBenchmark((std::string(r.name) + "/" + target).c_str(),
                                               [run, target](benchmark::State& state) {
                                                 weft::simd::ScopedTarget on(target);
                                                 run(state);
                                               }));
    }
  }
  for (const Registration& r : benchmarks()) {
    if (!r.per_target) r.configure(benchmark::RegisterBenchmark(r.name, r.run));
  }
  benchmark::AddCustomContext("weft SIMD targets", [&] {
    std::string names;
    for (const std::string& t : targets) names += (names.empty() ? "" : ", ") + t;
    return names;
  }());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
#endif  // HWY_ONCE
