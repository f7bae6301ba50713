// What a step costs on this machine, measured: the products' rates, the memory bandwidth and
// weft's own kernels (measure_compute, in a few seconds), and each collective's alpha-beta fit
// per backend (weft-bench machine, which writes all of it as JSON for weft-estimate to read).
//
//   weftrun --nproc-per-node 2 weft-bench machine --out machine.json
//   weft-estimate --config configs/debug.toml --nproc 2 --machine machine.json
//
// The estimate of step time (step_time.h) reads nothing else about the hardware; a cluster of
// such machines adds its network as a Placement (weft-estimate's --link-* options).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weft/base/dtype.h"

namespace weft::estimate {

// A Linear's three products: its forward (y = x W^T), its input's gradient (dx = dy W) and
// its weight's (dW = dy^T x). Each is measured at rows x in x out for each of kProductRows x
// kProductWidths x kProductWidths, in GFLOP/s; a product's rate is interpolated between them
// (log2 of each size; outside the grid, the nearest edge's).
enum class ProductKind { kForward, kBackwardInput, kBackwardWeight };
inline constexpr const char* kProductKindNames[] = {"forward", "backward_input", "backward_weight"};
inline constexpr std::int64_t kProductRows[] = {256, 1024};
inline constexpr std::int64_t kProductWidths[] = {128, 256, 512, 1024, 2048};
inline constexpr std::size_t kProductGridPoints =
    std::size(kProductRows) * std::size(kProductWidths) * std::size(kProductWidths);

// One precision's compute path (float32, or bfloat16 mixed precision).
struct ComputeCosts {
  // Matrix products at their best: Linear's forward over 1024 rows a thread of 1024 x 1024
  // (the figure weft-train's mfu is against), GFLOP/s on the threads measured.
  double product_gflops = 0;
  // Per ProductKind, [rows][in][out] over the grid above, GFLOP/s.
  std::array<std::vector<double>, 3> product_grids;
  double bandwidth_gbs = 0;  // memory copy, GB/s (read + write), 64 MiB buffers
  // Every figure below is the median of its runs; the peak above is the best.
  // weft's kernels, nanoseconds per element (per unit for attention: batch x heads x causal
  // (query, key) pairs x head_dim). The names and their elements: kernel_names() below.
  std::map<std::string, double> ns;

  double kernel_ns(const std::string& name) const;  // InvalidArgument for a name not measured
  // The rate of a product of this kind and shape, from product_grids.
  double product_rate(ProductKind kind, std::int64_t rows, std::int64_t in, std::int64_t out) const;
  // Every product at `gflops` (a machine described rather than measured).
  void set_product_rate(double gflops);
};

// The kernels measure_compute times, each with what its cost is per.
const std::map<std::string, std::string>& kernel_names();

// A collective's time for `bytes` over n ranks: steps(n) x alpha + traffic(n, bytes) x beta,
// with the steps and traffic of a ring (docs/ESTIMATE.md): all_reduce 2(n-1) steps moving
// 2(n-1)/n of the buffer, all_gather and reduce_scatter n-1 steps moving (n-1)/n of the whole
// buffer, sendrecv (each rank sending to the next) one step moving it all.
struct AlphaBeta {
  double alpha_s = 0;          // per step
  double beta_s_per_byte = 0;  // per byte a rank moves
  double worst_fit_error = 0;  // the fit's largest relative error over the sizes measured
};
double steps(const std::string& op, int n);
double traffic(const std::string& op, int n, double bytes);
double collective_seconds(const std::string& op, const AlphaBeta& fit, int n, double bytes);
// Least squares on the relative error over (bytes, seconds) pairs measured on n ranks.
AlphaBeta fit_alpha_beta(const std::string& op, int n, const std::map<double, double>& seconds);

struct BackendCosts {
  int ranks = 0;                         // measured on
  std::map<std::string, AlphaBeta> ops;  // all_reduce, all_gather, reduce_scatter, sendrecv
  const AlphaBeta& op(const std::string& name) const;
};

struct Machine {
  std::string cpu;     // the model name
  std::string target;  // weft's kernels' vector target (simd::current_target())
  int cores = 1;       // this host's
  int ranks = 1;       // computing at once while measured (each with `threads`)
  int threads = 1;     // weft's threads a rank
  // A step's compute with `ranks` ranks computing at once, over one rank computing alone
  // (shared caches, memory bandwidth, cores' siblings): the costs below are the former's.
  double shared_slowdown = 1;
  ComputeCosts float32, bfloat16;
  std::map<std::string, BackendCosts> backends;  // by backend name (shm, tcp, threads, mpi)

  const ComputeCosts& compute(DType products) const;
  const BackendCosts& backend(const std::string& name) const;  // InvalidArgument if absent
};

// Linear's forward at its best over about `budget`, GFLOP/s (ComputeCosts::product_gflops).
double measure_product_gflops(DType dtype, std::chrono::milliseconds budget);
// Every figure of ComputeCosts for `products` (kFloat32, or kBFloat16 for mixed precision),
// on kernels::threads() threads; a few seconds. `together`, when given, is called before each
// measurement and returns when every rank of the job has called it (a barrier), so that the
// ranks measure each kernel at once, sharing the host as training does.
ComputeCosts measure_compute(DType products, const std::function<void()>& together = {});
// A small mix of a step's compute (products in float32 and bfloat16, SwiGLU, attention) on
// a block of llama_512's size, for Machine::shared_slowdown: timed alone, then with every rank
// at once. Its buffers are made once, so that every timing works on the same warm pages.
class ComputeSample {
 public:
  ComputeSample();
  ~ComputeSample();
  ComputeSample(const ComputeSample&) = delete;
  ComputeSample& operator=(const ComputeSample&) = delete;

  // The median of `runs` runs after one untimed, in seconds.
  double seconds(std::size_t runs) const;

 private:
  struct Buffers;
  std::unique_ptr<Buffers> buffers_;
};
// This host's CPU model name, cores, and weft's vector target, with the compute costs left
// empty (Machine::ranks and threads as given).
Machine describe_host(int ranks, int threads);

std::string to_json(const Machine& machine);
// InvalidArgument naming the file and what is wrong with it.
Machine read_machine(const std::string& path);

}  // namespace weft::estimate
