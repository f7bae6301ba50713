#include "bench_tune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_ops.h"
#include "weft/base/error.h"
#include "weft/base/system.h"

namespace weft::tools {
namespace {

using dist::CollectiveTuning;

using dist::kNeverBytes;
constexpr double kMargin = 0.95;  // a size leaves the defaults' algorithm only if 5 % faster

// One decision: the operation, the sizes to try, the tuning that forces each of the two
// algorithms at a size (the second is the one the thresholds switch to), and whether a
// tuning picks the second at a size.
struct Decision {
  const char* what;
  const char* op;
  std::size_t from, to;
  const char* first_name;
  std::function<CollectiveTuning(std::size_t)> first;
  const char* second_name;
  std::function<CollectiveTuning(std::size_t)> second;
  std::function<bool(const CollectiveTuning&, std::size_t)> picks_second;
  // How the thresholds place the second algorithm: sizes up to hi, from lo, or in [lo, hi];
  // set() writes them.
  enum class Shape { kUpTo, kFrom, kRange } shape;
  std::function<void(CollectiveTuning&, std::size_t lo, std::size_t hi)> set;
  // A threshold set() writes: where the group's engine does not read it, it never takes the
  // second algorithm, and the decision is not measured.
  std::size_t CollectiveTuning::*threshold;
  bool shared = false;  // timed on SharedBuffers
};

struct Timed {
  std::size_t bytes;
  double first_us, second_us;
  bool default_second;  // what the defaults pick here
};

CollectiveTuning never_single_copy(CollectiveTuning t) {
  t.single_copy_all_reduce_min = t.single_copy_broadcast_min = kNeverBytes;
  t.single_copy_all_reduce_max = t.single_copy_broadcast_max = 0;
  t.single_copy_all_gather_min = kNeverBytes;
  t.single_copy_all_gather_max = 0;
  return t;
}

// The shm engine's single copy of `op` for sizes in [*min, *max], tried from `from` to 64 MiB
// against `otherwise` (which never takes it).
Decision single_copy(const char* what, const char* op, std::size_t from, const char* other_name,
                     const CollectiveTuning& otherwise, std::size_t CollectiveTuning::*min,
                     std::size_t CollectiveTuning::*max) {
  return {what,
          op,
          from,
          std::size_t{64} << 20,
          other_name,
          [=](std::size_t) { return otherwise; },
          "single copy",
          [=](std::size_t s) {
            CollectiveTuning t = otherwise;
            t.*min = t.*max = s;
            return t;
          },
          [=](const CollectiveTuning& t, std::size_t s) { return s >= t.*min && s <= t.*max; },
          Decision::Shape::kRange,
          [=](CollectiveTuning& t, std::size_t lo, std::size_t hi) {
            t.*min = lo;
            t.*max = hi;
          },
          min};
}

// The shm engine's in-place `op` on SharedBuffers from *min, tried from `from` to 256 KiB (past
// which it is far ahead) against the engine's other algorithms.
Decision in_place(const char* what, const char* op, std::size_t from,
                  std::size_t CollectiveTuning::*min) {
  return {what,
          op,
          from,
          std::size_t{256} << 10,
          "otherwise",
          [=](std::size_t) {
            CollectiveTuning t;
            t.*min = kNeverBytes;
            return t;
          },
          "in place",
          [=](std::size_t s) {
            CollectiveTuning t;
            t.*min = s;
            return t;
          },
          [=](const CollectiveTuning& t, std::size_t s) { return s >= t.*min; },
          Decision::Shape::kFrom,
          [=](CollectiveTuning& t, std::size_t lo, std::size_t) { t.*min = lo; },
          min,
          /*shared=*/true};
}

std::vector<Decision> decisions(std::string_view engine) {
  const CollectiveTuning sliced = [] {
    CollectiveTuning t = never_single_copy({});
    t.one_step_all_reduce_max = 0;
    return t;
  }();
  if (engine == "shm") {
    return {
        {"all_reduce in one step", "all_reduce", 1 << 10, 64 << 10, "sliced",
         [=](std::size_t) { return sliced; }, "one step",
         [=](std::size_t s) {
           CollectiveTuning t = sliced;
           t.one_step_all_reduce_max = s;
           return t;
         },
         [](const CollectiveTuning& t, std::size_t s) { return s <= t.one_step_all_reduce_max; },
         Decision::Shape::kUpTo,
         [](CollectiveTuning& t, std::size_t, std::size_t hi) { t.one_step_all_reduce_max = hi; },
         &CollectiveTuning::one_step_all_reduce_max},
        single_copy("all_reduce single copy", "all_reduce", 64 << 10, "sliced", sliced,
                    &CollectiveTuning::single_copy_all_reduce_min,
                    &CollectiveTuning::single_copy_all_reduce_max),
        single_copy("broadcast single copy", "broadcast", 16 << 10, "slots", sliced,
                    &CollectiveTuning::single_copy_broadcast_min,
                    &CollectiveTuning::single_copy_broadcast_max),
        single_copy("all_gather single copy", "all_gather", 16 << 10, "slots", sliced,
                    &CollectiveTuning::single_copy_all_gather_min,
                    &CollectiveTuning::single_copy_all_gather_max),
        in_place("all_reduce of shared buffers in place", "all_reduce", 32 << 10,
                 &CollectiveTuning::in_place_all_reduce_min),
        in_place("broadcast of shared buffers in place", "broadcast", 1 << 10,
                 &CollectiveTuning::in_place_broadcast_min),
    };
  }
  if (engine == "generic") {
    return {{"all_reduce ring", "all_reduce", 4 << 10, 16 << 20, "recursive doubling",
             [](std::size_t) {
               CollectiveTuning t;
               t.ring_all_reduce_min = kNeverBytes;
               return t;
             },
             "ring",
             [](std::size_t s) {
               CollectiveTuning t;
               t.ring_all_reduce_min = s;
               return t;
             },
             [](const CollectiveTuning& t, std::size_t s) { return s >= t.ring_all_reduce_min; },
             Decision::Shape::kFrom,
             [](CollectiveTuning& t, std::size_t lo, std::size_t) { t.ring_all_reduce_min = lo; },
             &CollectiveTuning::ring_all_reduce_min}};
  }
  return {};
}

double time_us(dist::ProcessGroup& pg, const char* op, std::size_t bytes,
               const CollectiveTuning& tuning, bool shared) {
  pg.tune(tuning);
  BenchOptions o;
  o.op = op;
  o.shared = shared;
  o.iters = bytes >= (std::size_t{16} << 20) ? 10 : 30;
  o.warmup = 3;
  return bench_size(pg, o, bytes).time_us;
}

// Both algorithms at every size, alternating, the better of two sweeps over the sizes: a
// spell in which the scheduler stacks the ranks on one CPU (unbound ranks, a noisy host) slows
// whatever runs then, for up to seconds; two sweeps put a size's two rounds far apart in time.
std::vector<Timed> measure(dist::ProcessGroup& pg, const Decision& d) {
  std::vector<Timed> out;
  for (std::size_t s = d.from; s <= d.to; s *= 2) {
    out.push_back({s, 1e30, 1e30, d.picks_second(CollectiveTuning{}, s)});
  }
  for (int sweep = 0; sweep < 2; ++sweep) {
    for (Timed& t : out) {
      t.first_us = std::min(t.first_us, time_us(pg, d.op, t.bytes, d.first(t.bytes), d.shared));
      t.second_us = std::min(t.second_us, time_us(pg, d.op, t.bytes, d.second(t.bytes), d.shared));
    }
  }
  return out;
}

// The defaults' (lo, hi) for a decision: which sizes they give the second algorithm.
std::pair<std::size_t, std::size_t> default_bounds(const Decision& d) {
  const CollectiveTuning defaults;
  std::size_t lo = kNeverBytes, hi = 0;
  for (std::size_t s = 1; s < kNeverBytes; s *= 2) {
    if (!d.picks_second(defaults, s)) continue;
    lo = std::min(lo, s);
    hi = s;
  }
  if (d.shape == Decision::Shape::kUpTo) lo = 0;
  if (d.shape == Decision::Shape::kFrom && lo != kNeverBytes) hi = kNeverBytes;
  return {lo, hi};
}

// Fitted thresholds, extended past the sizes tried ([d.from, d.to]) the way the defaults go:
// a measurement says nothing about sizes it did not try.
std::pair<std::size_t, std::size_t> beyond_as_defaults(const Decision& d, std::size_t lo,
                                                       std::size_t hi) {
  const auto [default_lo, default_hi] = default_bounds(d);
  switch (d.shape) {
    case Decision::Shape::kUpTo:
      if (hi < d.from) hi = std::min(default_hi, d.from / 2);
      if (hi >= d.to && default_hi > d.to) hi = default_hi;
      return {0, hi};
    case Decision::Shape::kFrom:
      if (lo == kNeverBytes)
        return {default_lo == kNeverBytes ? kNeverBytes : std::max(default_lo, d.to * 2),
                kNeverBytes};
      if (lo <= d.from && default_lo < d.from) lo = default_lo;
      return {lo, kNeverBytes};
    case Decision::Shape::kRange:
      break;
  }
  const bool defaults_empty = default_lo > default_hi;
  if (lo > hi) {  // none tried: the defaults' part above the sizes tried, else below
    if (!defaults_empty && default_hi > d.to) return {std::max(default_lo, d.to * 2), default_hi};
    if (!defaults_empty && default_lo < d.from)
      return {default_lo, std::min(default_hi, d.from / 2)};
    return {lo, hi};
  }
  if (hi >= d.to && !defaults_empty && default_hi > d.to) hi = default_hi;
  if (lo <= d.from && !defaults_empty && default_lo < d.from) lo = default_lo;
  return {lo, hi};
}

// The thresholds (lo, hi) that fit what was measured best: the least sum over the sizes of
// the log of the time the picked algorithm took, a size counted 5 % slower where the pick
// leaves the defaults' algorithm (so noise does not move a threshold).
void decide(const Decision& d, const std::vector<Timed>& timed, CollectiveTuning& t) {
  std::vector<std::size_t> edges;
  for (const Timed& x : timed) edges.push_back(x.bytes);
  std::vector<std::pair<std::size_t, std::size_t>> candidates;
  using Shape = Decision::Shape;
  if (d.shape == Shape::kUpTo) candidates.emplace_back(0, d.from / 2);
  if (d.shape != Shape::kUpTo)
    candidates.emplace_back(kNeverBytes, d.shape == Shape::kFrom ? kNeverBytes : 0);
  for (std::size_t i = 0; i < edges.size(); ++i) {
    if (d.shape == Shape::kUpTo) candidates.emplace_back(0, edges[i]);
    if (d.shape == Shape::kFrom) candidates.emplace_back(edges[i], kNeverBytes);
    for (std::size_t j = i; d.shape == Shape::kRange && j < edges.size(); ++j) {
      candidates.emplace_back(edges[i], edges[j]);
    }
  }
  double best_cost = 1e300;
  std::pair<std::size_t, std::size_t> best{};
  for (const auto& [lo, hi] : candidates) {
    double cost = 0;
    for (const Timed& x : timed) {
      const bool second = x.bytes >= lo && x.bytes <= hi;
      cost += std::log(second ? x.second_us : x.first_us);
      if (second != x.default_second) cost -= std::log(kMargin);
    }
    if (cost < best_cost) {
      best_cost = cost;
      best = {lo, hi};
    }
  }
  const auto [lo, hi] = beyond_as_defaults(d, best.first, best.second);
  d.set(t, lo, hi);
}

std::string size_text(std::size_t bytes) {
  if (bytes >= kNeverBytes) return "never";
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1 << 10) && bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

void print_decision(const Decision& d, const std::vector<Timed>& timed,
                    const CollectiveTuning& tuned) {
  std::printf("# %s, us (the better of two medians; *: the table's pick): %s | %s\n", d.what,
              d.first_name, d.second_name);
  for (const Timed& x : timed) {
    const bool second = d.picks_second(tuned, x.bytes);
    std::printf("  %10s %12.1f%s %12.1f%s\n", size_text(x.bytes).c_str(), x.first_us,
                second ? " " : "*", x.second_us, second ? "*" : " ");
  }
}

// The defaults against the table, every size of every decision, alternating, in two sweeps.
void print_effect(dist::ProcessGroup& pg, const std::vector<Decision>& ds,
                  const CollectiveTuning& tuned) {
  if (pg.rank() == 0) {
    std::printf("# the table's effect: %-10s %10s %12s %12s %8s\n", "op", "size", "defaults us",
                "table us", "speedup");
  }
  struct Effect {
    const char* op;
    bool shared;
    const char* label;
  };
  for (const auto& [op, shared, label] :
       {Effect{"all_reduce", false, "all_reduce"}, Effect{"broadcast", false, "broadcast"},
        Effect{"all_gather", false, "all_gather"},
        Effect{"all_reduce", true, "all_reduce (shared buffers)"},
        Effect{"broadcast", true, "broadcast (shared buffers)"}}) {
    std::vector<std::size_t> sizes;
    for (const Decision& d : ds) {
      if (std::string(d.op) != op || d.shared != shared) continue;
      for (std::size_t s = d.from; s <= d.to; s *= 2) sizes.push_back(s);
    }
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    std::vector<double> before(sizes.size(), 1e30), after(sizes.size(), 1e30);
    for (int sweep = 0; sweep < 2; ++sweep) {  // as measure() does
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        before[i] = std::min(before[i], time_us(pg, op, sizes[i], CollectiveTuning{}, shared));
        after[i] = std::min(after[i], time_us(pg, op, sizes[i], tuned, shared));
      }
    }
    for (std::size_t i = 0; i < sizes.size() && pg.rank() == 0; ++i) {
      std::printf("  %30s %10s %12.1f %12.1f %7.2fx\n", label, size_text(sizes[i]).c_str(),
                  before[i], after[i], before[i] / after[i]);
    }
  }
}

}  // namespace

void tune_collectives(dist::ProcessGroup& pg, const std::string& out, std::size_t min_bytes,
                      std::size_t max_bytes) {
  const dist::TuningKey key{cpu_model(), std::string(pg.backend_name()), pg.size()};
  std::vector<Decision> ds;
  std::vector<const char*> never_taken;
  for (Decision& d : decisions(pg.engine_name())) {
    d.from = std::max(d.from, min_bytes);
    d.to = std::min(d.to, max_bytes);
    if (d.from > d.to) continue;
    if (pg.reads_tuning(d.threshold)) {
      ds.push_back(std::move(d));
    } else {
      never_taken.push_back(d.what);
    }
  }
  if (ds.empty()) {
    if (pg.rank() == 0) {
      std::printf("# weft-bench tune: the %s engine (backend %s) has no thresholds to tune\n",
                  std::string(pg.engine_name()).c_str(), key.backend.c_str());
    }
    return;
  }
  if (pg.rank() == 0) {
    std::printf("# weft-bench tune: %s, backend %s, %d ranks, engine %s\n", key.cpu.c_str(),
                key.backend.c_str(), key.ranks, std::string(pg.engine_name()).c_str());
    for (const char* what : never_taken) {
      std::printf(
          "# %s: not measured, the table keeps the defaults: the engine never takes it "
          "on this job (its ranks share CPUs, or cannot read each other's memory)\n",
          what);
    }
  }
  const CollectiveTuning started = pg.tuning();
  CollectiveTuning tuned;
  for (const Decision& d : ds) {
    const std::vector<Timed> timed = measure(pg, d);
    decide(d, timed, tuned);
    if (pg.rank() == 0) print_decision(d, timed, tuned);
  }
  print_effect(pg, ds, tuned);
  pg.tune(started);
  if (pg.rank() != 0) return;
  const std::filesystem::path path =
      !out.empty() ? std::filesystem::path(out)
                   : dist::table_path(key).value_or(dist::default_table_path(key));
  if (path.empty()) throw Error("neither XDG_CACHE_HOME nor HOME is set: give --out FILE");
  dist::write_table(path, key, tuned);
  std::printf("# wrote %s:\n%s", path.c_str(), dist::format_table(key, tuned).c_str());
}

}  // namespace weft::tools
