#include "weft/estimate/machine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "weft/base/error.h"
#include "weft/base/simd.h"
#include "weft/base/system.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/convert.h"
#include "weft/kernels/elementwise.h"
#include "weft/kernels/embedding.h"
#include "weft/kernels/loss.h"
#include "weft/kernels/matmul.h"
#include "weft/kernels/parallel.h"
#include "weft/kernels/rmsnorm.h"
#include "weft/kernels/rope.h"
#include "weft/kernels/swiglu.h"
#include "weft/nn/optim.h"

namespace weft::estimate {
namespace {

using Clock = std::chrono::steady_clock;

// At least `runs` runs (after one untimed) within about `budget`, in seconds, sorted; `before`
// (when set) runs untimed before each.
std::vector<double> timed_runs(const std::function<void()>& run, std::chrono::milliseconds budget,
                               std::size_t runs = 5, const std::function<void()>& before = {}) {
  if (before) before();
  run();
  std::vector<double> times;
  const auto until = Clock::now() + budget;
  while (times.size() < runs || Clock::now() < until) {
    if (before) before();
    const auto start = Clock::now();
    run();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times;
}

// A pass over 64 MiB (beyond the 32 MiB of L3 a Zen core shares; fixed, as VMs report their
// socket's whole L3, 508 MiB on a 2-vCPU Zen 5): what a kernel's operands meet in training, where
// the products and layers between two uses of them fill the caches with other data. Timed with its
// operands in cache instead, RoPE ran 3.8 times faster than within a step, RMSNorm's backward 2.5
// times (perf, debug in bfloat16 on a Zen 5).
class CacheEvictor {
 public:
  void operator()() { std::fill(pass_.begin(), pass_.end(), pass_[0] + 1.0f); }

 private:
  std::vector<float> pass_ = std::vector<float>(std::size_t{16} << 20);
};

// Times the measurements. `together` (when set) runs before each and waits for every rank of
// the job, so that the ranks measure each kernel at the same time, as they run it in training;
// `before_each` (when set) runs untimed before every run.
struct Timer {
  std::function<void()> together;
  std::function<void()> before_each;

  // The median: a training step meets the machine as it typically is, not at its best moment.
  double typical(const std::function<void()>& run,
                 std::chrono::milliseconds budget = std::chrono::milliseconds(25),
                 std::size_t runs = 5) const {
    if (together) together();
    const std::vector<double> times = timed_runs(run, budget, runs, before_each);
    return times[times.size() / 2];
  }
};

double ns_per(double seconds, std::int64_t elements) {
  return seconds * 1e9 / static_cast<double>(elements);
}

template <class T>
double product_gflops(std::chrono::milliseconds budget) {
  constexpr std::int64_t n = 1024;
  const std::int64_t rows = n * kernels::threads();
  const std::vector<T> x(static_cast<std::size_t>(rows * n), T(0.5f)), w(n * n, T(0.25f));
  std::vector<float> y(static_cast<std::size_t>(rows * n));
  const double s = timed_runs(
      [&] { kernels::linear_forward(x.data(), w.data(), y.data(), rows, n, n); }, budget)[0];
  return 2.0 * static_cast<double>(rows * n * n) / s / 1e9;
}

// As training's Linear calls them: in mixed precision the inputs and output gradients are
// bfloat16 against the float32 weight (which the product rounds as it packs it, each call).
template <class T>
std::vector<double> product_grid(ProductKind kind, const Timer& t) {
  std::vector<double> grid;
  for (const std::int64_t rows : kProductRows) {
    for (const std::int64_t in : kProductWidths) {
      for (const std::int64_t out : kProductWidths) {
        const std::vector<T> x(static_cast<std::size_t>(rows * in), T(0.5f)),
            dy(static_cast<std::size_t>(rows * out), T(0.5f));
        const std::vector<float> w(static_cast<std::size_t>(in * out), 0.25f);
        std::vector<float> y(static_cast<std::size_t>(rows * out)),
            dx(static_cast<std::size_t>(rows * in)), dw(static_cast<std::size_t>(in * out));
        const auto run = [&] {
          if (kind == ProductKind::kForward) {
            kernels::linear_forward(x.data(), w.data(), y.data(), rows, in, out);
          } else if (kind == ProductKind::kBackwardWeight) {
            kernels::linear_backward<T>(dy.data(), x.data(), nullptr, nullptr, dw.data(), rows, in,
                                        out, false, false);
          } else if constexpr (std::is_same_v<T, float>) {
            kernels::linear_backward<float>(dy.data(), nullptr, w.data(), dx.data(), nullptr, rows,
                                            in, out);
          } else {
            kernels::linear_backward_input(dy.data(), w.data(), dx.data(), rows, in, out, false);
          }
        };
        const double s = t.typical(run, std::chrono::milliseconds(4), 3);
        grid.push_back(2.0 * static_cast<double>(rows * in * out) / s / 1e9);
      }
    }
  }
  return grid;
}

// Where `size` falls on `axis` in log2: the index below and the weight of the one above.
template <std::size_t N>
std::pair<std::size_t, double> locate(const std::int64_t (&axis)[N], std::int64_t size) {
  const double x = std::log2(static_cast<double>(std::max<std::int64_t>(size, 1)));
  for (std::size_t i = 0; i + 1 < N; ++i) {
    const double lo = std::log2(static_cast<double>(axis[i]));
    const double hi = std::log2(static_cast<double>(axis[i + 1]));
    if (x <= hi || i + 2 == N) return {i, std::clamp((x - lo) / (hi - lo), 0.0, 1.0)};
  }
  return {0, 0};
}

double bandwidth_gbs(const Timer& t) {
  const std::size_t n = std::size_t{16} << 20;  // floats: 64 MiB
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  const double s = t.typical([&] {
    kernels::parallel_for(
        static_cast<std::int64_t>(n), 1 << 16, [&](std::int64_t i, std::int64_t e) {
          std::memcpy(b.data() + i, a.data() + i, static_cast<std::size_t>(e - i) * sizeof(float));
        });
  });
  return 2.0 * static_cast<double>(n * sizeof(float)) / s / 1e9;
}

// The sizes the kernels are timed at: a block of configs/llama_512.toml's width (heads of 64),
// over a batch of 8 x 256 positions.
constexpr std::int64_t kRows = 2048, kDim = 512, kHidden = 1408, kVocab = 2048;
constexpr std::int64_t kHeads = 8, kHeadDim = 64;

std::vector<float> filled(std::int64_t n, float value = 0.5f) {
  return std::vector<float>(static_cast<std::size_t>(n), value);
}
std::vector<BFloat16> filled16(std::int64_t n) {
  return std::vector<BFloat16>(static_cast<std::size_t>(n), BFloat16(0.5f));
}

void measure_norms(bool mixed, ComputeCosts& c, const Timer& t) {
  const std::int64_t n = kRows * kDim;
  auto x = filled(n), w = filled(kDim, 1.0f), y = filled(n), rstd = filled(kRows), dx = filled(n),
       dw = filled(kDim);
  auto y16 = filled16(n);
  c.ns["rmsnorm_forward"] = ns_per(t.typical([&] {
    if (mixed) {
      kernels::rmsnorm_forward(x.data(), w.data(), y16.data(), rstd.data(), kRows, kDim, 1e-5);
    } else {
      kernels::rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), kRows, kDim, 1e-5);
    }
  }),
                                   n);
  c.ns["rmsnorm_backward"] = ns_per(t.typical([&] {
    kernels::rmsnorm_backward(y.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(),
                              kRows, kDim, false);
  }),
                                    n);
}

// On q|k|v rows as attention holds them, q's and k's heads rotated; in mixed precision the pass
// rounds the whole row, v too, to bfloat16 (per element of the row then, else per rotated one).
void measure_rope(bool mixed, ComputeCosts& c, const Timer& t) {
  const std::int64_t batch = kRows / 256, seq = 256, heads = 2 * kHeads;
  const std::int64_t width = 3 * kHeads * kHeadDim;
  auto x = filled(kRows * width);
  auto y16 = filled16(kRows * width);
  for (const bool backward : {false, true}) {
    c.ns[backward ? "rope_backward" : "rope_forward"] =
        ns_per(t.typical([&] {
          if (mixed && backward) {
            kernels::rope_backward_bf16(x.data(), y16.data(), batch, seq, heads, kHeadDim, 1e4, 0,
                                        width);
          } else if (mixed) {
            kernels::rope_forward_bf16(x.data(), y16.data(), batch, seq, heads, kHeadDim, 1e4, 0,
                                       width);
          } else if (backward) {
            kernels::rope_backward(x.data(), batch, seq, heads, kHeadDim, 1e4, 0, width);
          } else {
            kernels::rope_forward(x.data(), batch, seq, heads, kHeadDim, 1e4, 0, width);
          }
        }),
               kRows * (mixed ? width : heads * kHeadDim));
  }
}

void measure_swiglu(bool mixed, ComputeCosts& c, const Timer& t) {
  const std::int64_t n = kRows * kHidden;
  auto ab = filled(2 * n), h = filled(n), dh = filled(n);
  auto ab16 = filled16(2 * n), h16 = filled16(n);
  c.ns["swiglu_forward"] = ns_per(t.typical([&] {
    if (mixed) {
      kernels::swiglu_forward(ab16.data(), ab16.data() + kHidden, h16.data(), kRows, kHidden,
                              2 * kHidden);
    } else {
      kernels::swiglu_forward(ab.data(), ab.data() + kHidden, h.data(), kRows, kHidden,
                              2 * kHidden);
    }
  }),
                                  n);
  c.ns["swiglu_backward"] = ns_per(t.typical([&] {
    // In place: later runs read the earlier ones' outputs, at the same cost.
    if (mixed) {
      kernels::swiglu_backward_bf16(dh.data(), ab16.data(), ab16.data() + kHidden, kRows, kHidden,
                                    2 * kHidden);
    } else {
      kernels::swiglu_backward(dh.data(), ab.data(), ab.data() + kHidden, kRows, kHidden,
                               2 * kHidden);
    }
  }),
                                   n);
}

template <class T>
void measure_attention(ComputeCosts& c, const Timer& t) {
  const std::int64_t batch = 2, seq = 256;
  const kernels::AttentionShape s{batch, seq, kHeads, kHeads, kHeadDim};
  const std::int64_t n = batch * seq * kHeads * kHeadDim;
  const std::int64_t units = batch * kHeads * seq * (seq + 1) / 2 * kHeadDim;
  std::vector<T> q(static_cast<std::size_t>(n), T(0.1f)), k = q, v = q;
  auto out = filled(n), lse = filled(batch * kHeads * seq), dout = filled(n), dq = filled(n),
       dk = filled(n), dv = filled(n);
  std::vector<T> out_t(static_cast<std::size_t>(n), T(0.1f));
  c.ns["attention_forward"] = ns_per(t.typical([&] {
    kernels::attention_forward(s, q.data(), k.data(), v.data(), out.data(), lse.data());
  }),
                                     units);
  kernels::attention_forward(s, q.data(), k.data(), v.data(), out.data(), lse.data());
  c.ns["attention_backward"] = ns_per(t.typical([&] {
    if constexpr (std::is_same_v<T, float>) {
      kernels::attention_backward(s, q.data(), k.data(), v.data(), out.data(), dout.data(),
                                  lse.data(), dq.data(), dk.data(), dv.data());
    } else {
      kernels::attention_backward(s, q.data(), k.data(), v.data(), out_t.data(), dout.data(),
                                  lse.data(), dq.data(), dk.data(), dv.data());
    }
  }),
                                      units);
}

void measure_loss_and_embedding(bool mixed, ComputeCosts& c, const Timer& t) {
  const std::int64_t n = kRows * kVocab;
  auto logits = filled(n, 0.01f), losses = filled(kRows), dlogits = filled(n);
  auto dlogits16 = filled16(n);
  std::vector<std::int32_t> targets(static_cast<std::size_t>(kRows));
  for (std::int64_t i = 0; i < kRows; ++i) targets[static_cast<std::size_t>(i)] = (i * 7) % kVocab;
  c.ns["cross_entropy"] = ns_per(t.typical([&] {
    kernels::cross_entropy_forward(logits.data(), targets.data(), kRows, kVocab, losses.data());
    if (mixed) {
      kernels::cross_entropy_backward(logits.data(), targets.data(), kRows, kVocab, 1e-3,
                                      dlogits16.data());
    } else {
      kernels::cross_entropy_backward(logits.data(), targets.data(), kRows, kVocab, 1e-3,
                                      dlogits.data());
    }
  }),
                                 n);
  const std::int64_t m = kRows * kDim;
  auto table = filled(kVocab * kDim), out = filled(m);
  c.ns["embedding_forward"] = ns_per(t.typical([&] {
    kernels::embedding_forward(targets.data(), kRows, table.data(), kVocab, kDim, out.data());
  }),
                                     m);
  c.ns["embedding_backward"] = ns_per(t.typical([&] {
    kernels::embedding_backward(targets.data(), kRows, out.data(), kVocab, kDim, table.data());
  }),
                                      m);
}

void measure_optimizer(ComputeCosts& c, const Timer& t) {
  const std::int64_t n = std::int64_t{4} << 20;
  auto p = filled(n), g = filled(n, 1e-3f), m = filled(n, 0.0f), v = filled(n, 0.0f);
  std::vector<BFloat16> p16(static_cast<std::size_t>(n));
  const nn::AdamWOptions options;
  std::int64_t step = 0;
  c.ns["adamw"] = ns_per(t.typical([&] {
    nn::adamw_update(p.data(), g.data(), m.data(), v.data(), n, options, 1e-3, ++step);
  }),
                         n);
  c.ns["sum_squares"] = ns_per(t.typical([&] { (void)kernels::sum_squares(g.data(), n); }), n);
  c.ns["to_bfloat16"] =
      ns_per(t.typical([&] { kernels::to_bfloat16_threaded(p.data(), p16.data(), n); }), n);
}

}  // namespace

const std::map<std::string, std::string>& kernel_names() {
  static const std::map<std::string, std::string> names{
      {"rmsnorm_forward", "rows x dim"},
      {"rmsnorm_backward", "rows x dim"},
      {"rope_forward", "rows x (heads + kv_heads) x head_dim (bfloat16: x (heads + 2 kv_heads))"},
      {"rope_backward", "rows x (heads + kv_heads) x head_dim (bfloat16: x (heads + 2 kv_heads))"},
      {"swiglu_forward", "rows x hidden"},
      {"swiglu_backward", "rows x hidden"},
      {"attention_forward", "batch x heads x causal pairs x head_dim"},
      {"attention_backward", "batch x heads x causal pairs x head_dim"},
      {"cross_entropy", "rows x vocab (forward and backward)"},
      {"embedding_forward", "rows x dim"},
      {"embedding_backward", "rows x dim"},
      {"adamw", "parameters"},
      {"sum_squares", "parameters (the gradients' norm)"},
      {"to_bfloat16", "elements rounded"},
  };
  return names;
}

void ComputeCosts::set_product_rate(double gflops) {
  for (std::vector<double>& grid : product_grids) grid.assign(kProductGridPoints, gflops);
}

double ComputeCosts::product_rate(ProductKind kind, std::int64_t rows, std::int64_t in,
                                  std::int64_t out) const {
  const std::vector<double>& grid = product_grids[static_cast<std::size_t>(kind)];
  constexpr std::size_t kWidths = std::size(kProductWidths);
  const auto [r, wr] = locate(kProductRows, rows);
  const auto [i, wi] = locate(kProductWidths, in);
  const auto [o, wo] = locate(kProductWidths, out);
  double rate = 0;
  for (std::size_t dr = 0; dr < 2; ++dr) {
    for (std::size_t di = 0; di < 2; ++di) {
      for (std::size_t d_o = 0; d_o < 2; ++d_o) {
        const double weight = (dr ? wr : 1 - wr) * (di ? wi : 1 - wi) * (d_o ? wo : 1 - wo);
        if (weight == 0) continue;
        rate += weight * grid[((r + dr) * kWidths + i + di) * kWidths + o + d_o];
      }
    }
  }
  return rate;
}

double ComputeCosts::kernel_ns(const std::string& name) const {
  const auto it = ns.find(name);
  if (it == ns.end()) throw InvalidArgument("the machine's costs lack the kernel '" + name + "'");
  return it->second;
}

double measure_product_gflops(DType dtype, std::chrono::milliseconds budget) {
  return dtype == DType::kBFloat16 ? product_gflops<BFloat16>(budget)
                                   : product_gflops<float>(budget);
}

ComputeCosts measure_compute(DType products, const std::function<void()>& together) {
  const bool mixed = products == DType::kBFloat16;
  const Timer t{together};
  ComputeCosts c;
  if (together) together();
  c.product_gflops = measure_product_gflops(products, std::chrono::milliseconds(200));
  for (const ProductKind kind :
       {ProductKind::kForward, ProductKind::kBackwardInput, ProductKind::kBackwardWeight}) {
    c.product_grids[static_cast<std::size_t>(kind)] =
        mixed ? product_grid<BFloat16>(kind, t) : product_grid<float>(kind, t);
  }
  c.bandwidth_gbs = bandwidth_gbs(t);
  CacheEvictor evict;
  const Timer cold{together, std::ref(evict)};
  measure_norms(mixed, c, cold);
  measure_rope(mixed, c, cold);
  measure_swiglu(mixed, c, cold);
  if (mixed) {
    measure_attention<BFloat16>(c, cold);
  } else {
    measure_attention<float>(c, cold);
  }
  measure_loss_and_embedding(mixed, c, cold);
  measure_optimizer(c, cold);
  return c;
}

// A block of llama_512's size over a batch of 8 x 256: its working set (tens of MiB) is
// what training shares between ranks, beyond the caches.
struct ComputeSample::Buffers {
  static constexpr std::int64_t kRows = 2048, kIn = 512, kOut = 2816;
  const kernels::AttentionShape shape{8, 256, kHeads, kHeads, kHeadDim};
  std::vector<float> x = filled(kRows * kIn), w = filled(kIn * kOut, 0.25f);
  std::vector<BFloat16> x16 = std::vector<BFloat16>(kRows * kIn, BFloat16(0.5f));
  std::vector<float> y = filled(kRows * kOut), dx = filled(kRows * kIn);
  std::vector<float> q = filled(8 * 256 * kHeads * kHeadDim, 0.1f), att = q;
  std::vector<float> lse = filled(8 * 256 * kHeads);

  void run() {
    kernels::linear_forward(x.data(), w.data(), y.data(), kRows, kIn, kOut);
    kernels::swiglu_forward(y.data(), y.data() + kOut / 2, y.data(), kRows, kOut / 2, kOut);
    kernels::linear_backward<float>(y.data(), nullptr, w.data(), dx.data(), nullptr, kRows, kIn,
                                    kOut);
    kernels::linear_forward(x16.data(), w.data(), y.data(), kRows, kIn, kOut);
    kernels::attention_forward(shape, q.data(), q.data(), q.data(), att.data(), lse.data());
  }
};

ComputeSample::ComputeSample() : buffers_(std::make_unique<Buffers>()) {}
ComputeSample::~ComputeSample() = default;

double ComputeSample::seconds(std::size_t runs) const {
  const std::vector<double> times =
      timed_runs([this] { buffers_->run(); }, std::chrono::milliseconds(0), runs);
  return times[times.size() / 2];
}

Machine describe_host(int ranks, int threads) {
  Machine m;
  m.cpu = cpu_model();
  m.target = simd::current_target();
  m.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  m.ranks = ranks;
  m.threads = threads;
  return m;
}

// --- the collectives' model ---------------------------------------------------------------

double steps(const std::string& op, int n) {
  if (n <= 1) return 0;
  if (op == "all_reduce") return 2.0 * (n - 1);
  if (op == "all_gather" || op == "reduce_scatter") return n - 1.0;
  if (op == "sendrecv") return 1;
  throw InvalidArgument("no alpha-beta model for the collective '" + op + "'");
}

double traffic(const std::string& op, int n, double bytes) {
  if (n <= 1) return 0;
  if (op == "all_reduce") return 2.0 * (n - 1) / n * bytes;
  if (op == "all_gather" || op == "reduce_scatter") return (n - 1.0) / n * bytes;
  if (op == "sendrecv") return bytes;
  throw InvalidArgument("no alpha-beta model for the collective '" + op + "'");
}

double collective_seconds(const std::string& op, const AlphaBeta& fit, int n, double bytes) {
  return steps(op, n) * fit.alpha_s + traffic(op, n, bytes) * fit.beta_s_per_byte;
}

// Minimises sum ((s a + t b - y) / y)^2 over a, b >= 0: the 2x2 normal equations, and the
// best one-parameter fit where the joint one leaves its quadrant.
AlphaBeta fit_alpha_beta(const std::string& op, int n, const std::map<double, double>& seconds) {
  if (seconds.size() < 2 || n < 2)
    throw InvalidArgument("an alpha-beta fit needs two sizes or more on two ranks or more");
  double ss = 0, st = 0, tt = 0, sy = 0, ty = 0;
  for (const auto& [bytes, y] : seconds) {
    const double s = steps(op, n) / y, t = traffic(op, n, bytes) / y;
    ss += s * s, st += s * t, tt += t * t, sy += s, ty += t;
  }
  AlphaBeta fit;
  const double det = ss * tt - st * st;
  fit.alpha_s = det != 0 ? (sy * tt - ty * st) / det : 0;
  fit.beta_s_per_byte = det != 0 ? (ty * ss - sy * st) / det : 0;
  if (fit.alpha_s < 0 || fit.beta_s_per_byte < 0) {
    const double alpha_only = sy / ss, beta_only = ty / tt;
    double alpha_error = 0, beta_error = 0;
    for (const auto& [bytes, y] : seconds) {
      alpha_error += std::pow(steps(op, n) * alpha_only / y - 1, 2);
      beta_error += std::pow(traffic(op, n, bytes) * beta_only / y - 1, 2);
    }
    fit = alpha_error < beta_error ? AlphaBeta{alpha_only, 0} : AlphaBeta{0, beta_only};
  }
  for (const auto& [bytes, y] : seconds)
    fit.worst_fit_error =
        std::max(fit.worst_fit_error, std::abs(collective_seconds(op, fit, n, bytes) / y - 1));
  return fit;
}

const AlphaBeta& BackendCosts::op(const std::string& name) const {
  const auto it = ops.find(name);
  if (it == ops.end()) throw InvalidArgument("the machine's costs lack the collective " + name);
  return it->second;
}

const ComputeCosts& Machine::compute(DType products) const {
  return products == DType::kBFloat16 ? bfloat16 : float32;
}

const BackendCosts& Machine::backend(const std::string& name) const {
  const auto it = backends.find(name);
  if (it == backends.end()) {
    std::string have;
    for (const auto& [b, costs] : backends) have += (have.empty() ? "" : ", ") + b;
    throw InvalidArgument("the machine's costs have no collectives measured on the " + name +
                          " backend (" + (have.empty() ? "none" : "only " + have) +
                          "): run weft-bench machine under weftrun with --backend " + name);
  }
  return it->second;
}

// --- JSON ----------------------------------------------------------------------------------

namespace {

nlohmann::json compute_json(const ComputeCosts& c) {
  nlohmann::json grids = nlohmann::json::object();
  for (std::size_t k = 0; k < c.product_grids.size(); ++k)
    grids[kProductKindNames[k]] = c.product_grids[k];
  return {{"product_gflops", c.product_gflops},
          {"product_grids", grids},
          {"bandwidth_gbs", c.bandwidth_gbs},
          {"ns", c.ns}};
}

ComputeCosts compute_from(const nlohmann::json& j) {
  ComputeCosts c;
  c.product_gflops = j.at("product_gflops").get<double>();
  c.bandwidth_gbs = j.at("bandwidth_gbs").get<double>();
  c.ns = j.at("ns").get<std::map<std::string, double>>();
  for (std::size_t k = 0; k < c.product_grids.size(); ++k) {
    std::vector<double>& grid = c.product_grids[k];
    grid = j.at("product_grids").at(kProductKindNames[k]).get<std::vector<double>>();
    if (grid.size() != kProductGridPoints ||
        std::any_of(grid.begin(), grid.end(), [](double r) { return r <= 0; }))
      throw InvalidArgument(std::string("product_grids.") + kProductKindNames[k] + " must hold " +
                            std::to_string(kProductGridPoints) + " positive rates");
  }
  if (c.product_gflops <= 0 || c.bandwidth_gbs <= 0)
    throw InvalidArgument("product_gflops and bandwidth_gbs must be positive");
  for (const auto& [name, per] : kernel_names())
    if (!c.ns.count(name)) throw InvalidArgument("no cost for the kernel " + name);
  for (const auto& [name, ns] : c.ns)
    if (!std::isfinite(ns) || ns < 0)
      throw InvalidArgument("the kernel " + name + "'s cost must be a number >= 0");
  return c;
}

}  // namespace

std::string to_json(const Machine& m) {
  nlohmann::json backends = nlohmann::json::object();
  for (const auto& [name, b] : m.backends) {
    nlohmann::json ops = nlohmann::json::object();
    for (const auto& [op, f] : b.ops)
      ops[op] = {{"alpha_us", f.alpha_s * 1e6},
                 {"beta_ns_per_byte", f.beta_s_per_byte * 1e9},
                 {"worst_fit_error", f.worst_fit_error}};
    backends[name] = {{"ranks", b.ranks}, {"ops", ops}};
  }
  const nlohmann::json j{{"cpu", m.cpu},
                         {"target", m.target},
                         {"cores", m.cores},
                         {"ranks", m.ranks},
                         {"threads", m.threads},
                         {"shared_slowdown", m.shared_slowdown},
                         {"float32", compute_json(m.float32)},
                         {"bfloat16", compute_json(m.bfloat16)},
                         {"backends", backends}};
  return j.dump(2) + "\n";
}

Machine read_machine(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument("cannot read the machine's costs " + path);
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    Machine m;
    m.cpu = j.at("cpu").get<std::string>();
    m.target = j.at("target").get<std::string>();
    m.cores = j.at("cores").get<int>();
    m.ranks = j.at("ranks").get<int>();
    m.threads = j.at("threads").get<int>();
    m.shared_slowdown = j.at("shared_slowdown").get<double>();
    if (m.shared_slowdown <= 0) throw InvalidArgument("shared_slowdown must be positive");
    if (m.cores < 1 || m.ranks < 1 || m.threads < 1)
      throw InvalidArgument("cores, ranks and threads must be positive");
    m.float32 = compute_from(j.at("float32"));
    m.bfloat16 = compute_from(j.at("bfloat16"));
    for (const auto& [name, b] : j.at("backends").items()) {
      BackendCosts costs;
      costs.ranks = b.at("ranks").get<int>();
      if (costs.ranks < 2) throw InvalidArgument(name + ": fitted on 2 ranks or more");
      for (const auto& [op, f] : b.at("ops").items()) {
        AlphaBeta fit{f.at("alpha_us").get<double>() * 1e-6,
                      f.at("beta_ns_per_byte").get<double>() * 1e-9,
                      f.value("worst_fit_error", 0.0)};
        if (fit.alpha_s < 0 || fit.beta_s_per_byte < 0)
          throw InvalidArgument(name + " " + op + ": alpha and beta must be >= 0");
        (void)steps(op, 2);  // a known collective
        costs.ops[op] = fit;
      }
      m.backends[name] = costs;
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument("the machine's costs " + path + " are not valid: " + e.what());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("the machine's costs " + path + ": " + e.what());
  }
}

}  // namespace weft::estimate
