#include "bench_machine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "bench_ops.h"
#include "weft/estimate/machine.h"
#include "weft/kernels/matmul.h"
#include "weft/kernels/parallel.h"

namespace weft::tools {
namespace {

// The sizes the fit sees: from where the latency dominates to where the bandwidth does.
constexpr std::size_t kSmallest = 4 << 10, kLargest = 16 << 20;

// What a training step does between its collectives, in small: a product of about a
// millisecond, then a pass over 16 MiB that leaves the caches holding other data. Each rank
// arrives at the next collective when its own work ends, as in training, not at a barrier.
class Compute {
 public:
  void operator()() {
    kernels::linear_forward(x_.data(), w_.data(), y_.data(), kRows, kWidth, kWidth);
    std::fill(evict_.begin(), evict_.end(), evict_[0] + 1.0f);
  }

 private:
  static constexpr std::int64_t kRows = 1024, kWidth = 512;
  std::vector<float> x_ = std::vector<float>(kRows * kWidth, 0.5f);
  std::vector<float> w_ = std::vector<float>(kWidth * kWidth, 0.25f);
  std::vector<float> y_ = std::vector<float>(kRows * kWidth);
  std::vector<float> evict_ = std::vector<float>(std::size_t{4} << 20);
};

estimate::AlphaBeta measure_op(dist::ProcessGroup& pg, const char* op, Compute& compute) {
  BenchOptions o;
  o.op = op;
  o.iters = 20;  // the median of 20: the compute between them makes each call's time vary
  o.warmup = 3;
  o.between = [&compute] { compute(); };
  std::map<double, double> seconds;
  for (std::size_t bytes = kSmallest; bytes <= kLargest; bytes *= 4) {
    const SizeResult r = bench_size(pg, o, bytes);
    seconds[static_cast<double>(r.bytes)] = r.time_us * 1e-6;
  }
  return estimate::fit_alpha_beta(op, pg.size(), seconds);
}

bool degenerate(const estimate::AlphaBeta& fit) {
  return fit.alpha_s == 0 || fit.beta_s_per_byte == 0;
}

// A fit with no per-step or no per-byte cost says the times barely followed the size: other
// work had the cores. Such an op is measured again, up to kTries times in all, until a fit has
// both (else the one with the smallest error is kept). Every rank sees the same times (the slowest
// rank's), so all decide alike.
constexpr int kTries = 3;

estimate::BackendCosts measure_collectives(dist::ProcessGroup& pg) {
  estimate::BackendCosts costs;
  costs.ranks = pg.size();
  Compute compute;
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "sendrecv"}) {
    estimate::AlphaBeta best = measure_op(pg, op, compute);
    for (int tries = 1; tries < kTries && degenerate(best); ++tries) {
      const estimate::AlphaBeta again = measure_op(pg, op, compute);
      if (!degenerate(again) || again.worst_fit_error < best.worst_fit_error) best = again;
    }
    if (degenerate(best) && pg.rank() == 0) {
      std::fprintf(stderr,
                   "weft-bench: %s's times barely follow its size (%d tries): was the machine "
                   "busy? Its costs are kept; measure again on an idle machine.\n",
                   op, kTries);
    }
    costs.ops[op] = best;
  }
  return costs;
}

// The sample's time with every rank computing at once over its time on rank 0 alone (the others
// asleep, not spinning in a barrier), on rank 0 (1 elsewhere). The two alternate over several
// rounds and each is the median of its rounds: a VM's speed drifts over seconds with its host's
// other tenants (one copy's bandwidth here moved between 11 and 44 GB/s from one minute to the
// next), and one timing of each once put the ratio at 2.5 where training's was 1.05.
double measure_shared_slowdown(dist::ProcessGroup& pg) {
  constexpr int kRounds = 5;
  constexpr std::size_t kRuns = 3;
  const estimate::ComputeSample sample;
  std::vector<double> alone, shared;
  for (int round = 0; round < kRounds; ++round) {
    pg.barrier();
    shared.push_back(sample.seconds(kRuns));
    pg.barrier();
    if (pg.rank() == 0) {
      alone.push_back(sample.seconds(kRuns));
    } else {
      // Asleep while rank 0 takes kRuns + 1 runs, each no slower than a shared one: three times
      // that, so that a slow moment of rank 0's does not find the others awake.
      std::this_thread::sleep_for(std::chrono::duration<double>(3 * (kRuns + 1) * shared.back()));
    }
  }
  if (pg.rank() != 0) return 1;
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // Sharing the host never speeds a rank up: a ratio under 1 is the noise of the timings.
  return std::max(1.0, median(shared) / median(alone));
}

}  // namespace

void measure_machine(dist::ProcessGroup& pg, const std::string& path) {
  if (pg.size() < 2) {
    throw InvalidArgument(
        "weft-bench machine fits the collectives on 2 ranks or more: run it under weftrun "
        "--nproc-per-node N (or with --threads N), N the ranks a host will run");
  }
  estimate::Machine machine = estimate::describe_host(pg.size(), kernels::threads());
  const auto together = [&pg] { pg.barrier(); };
  machine.shared_slowdown = measure_shared_slowdown(pg);
  machine.float32 = estimate::measure_compute(DType::kFloat32, together);
  machine.bfloat16 = estimate::measure_compute(DType::kBFloat16, together);
  pg.barrier();
  const std::string backend(pg.backend_name());
  machine.backends[backend] = measure_collectives(pg);
  if (pg.rank() != 0) return;
  if (std::filesystem::exists(path)) {
    try {
      for (const auto& [name, costs] : estimate::read_machine(path).backends)
        if (name != backend) machine.backends[name] = costs;
    } catch (const InvalidArgument& e) {
      std::fprintf(stderr, "weft-bench: replacing what is there: %s\n", e.what());
    }
  }
  const std::string text = estimate::to_json(machine);
  std::ofstream out(path);
  out << text;
  if (!out) throw Error("cannot write " + path);
  std::fputs(text.c_str(), stdout);
}

}  // namespace weft::tools
