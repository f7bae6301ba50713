// weft-bench: collective benchmarks with nccl-tests' conventions (sizes swept from -b to -e
// by factor -f; time, algbw and busbw per size; the average busbw last).
//
//   weftrun --nproc-per-node 2 build/release/tools/weft-bench all_reduce -b 8 -e 64M -f 4
//   build/release/tools/weft-bench broadcast --threads 4 --check
//   weftrun --nnodes 2 ... weft-bench all_reduce --group host   (each host's ranks at once)
//   weftrun --nproc-per-node 2 ... weft-bench all_gather --group generic   (shm's rings)
//   weftrun --nproc-per-node 2 build/release/tools/weft-bench machine --out machine.json
//   weftrun --nproc-per-node 2 build/release/tools/weft-bench --tune
//
// machine measures what weft-estimate's step time reads (estimate/machine.h): the compute
// path on every rank at once, and each collective's alpha-beta fit on the backend. --tune (or
// the op tune) measures where the backend's engine should change algorithm on this machine
// and writes the table later jobs of the same backend and rank count read (bench_tune.h).
//
// size is the bytes of the largest buffer of the operation (the output for all_gather, the
// input for reduce_scatter, each rank's buffer for all_to_all); time is the median of the
// timed iterations on the slowest rank (of the group: with --group each group's rank 0
// prints its own table); algbw = size / time; busbw = algbw * 2(n-1)/n for
// all_reduce, * (n-1)/n for all_gather, reduce_scatter and all_to_all, * 1 otherwise; best
// and p99 (nearest rank) are the fastest iteration and the 99th percentile, the slowest rank's,
// so that a tail shows beside the median.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "bench_machine.h"
#include "bench_ops.h"
#include "bench_tune.h"
#include "weft/base/simd.h"
#include "weft/dist.h"

namespace {

using weft::dist::ProcessGroup;
using weft::tools::BenchOptions;

std::size_t parse_size(const std::string& text) {
  std::size_t used = 0;
  const double value = std::stod(text, &used);
  const std::string unit = text.substr(used);
  const std::map<std::string, double> scale{
      {"", 1}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}};
  const auto it = scale.find(unit);
  if (it == scale.end())
    throw CLI::ValidationError("size '" + text + "': use a number with K, M or G");
  return static_cast<std::size_t>(value * it->second);
}

void print_header(const BenchOptions& o, const ProcessGroup& pg) {
  std::printf(
      "# weft-bench %s  backend %s  group %s  ranks %d  dtype %s  redop %s  warmup %d  iters %d\n",
      o.op.c_str(), std::string(pg.backend_name()).c_str(), o.group.c_str(), pg.size(),
      std::string(weft::dtype_name(o.dtype)).c_str(),
      std::string(weft::dist::reduce_op_name(o.redop)).c_str(), o.warmup, o.iters);
  std::printf("# %12s %12s %9s %7s %5s %10s %8s %8s %7s %10s %10s\n", "size", "count", "type",
              "redop", "root", "time", "algbw", "busbw", "#wrong", "best", "p99");
  std::printf("# %12s %12s %9s %7s %5s %10s %8s %8s %7s %10s %10s\n", "(B)", "(elements)", "", "",
              "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)");
}

// Runs the sweep on this rank; rank 0 prints. Returns the number of wrong elements seen.
long run(ProcessGroup& pg, const BenchOptions& o) {
  if (pg.rank() == 0) print_header(o, pg);
  double busbw_sum = 0;
  int sizes = 0;
  long wrong_total = 0;
  for (std::size_t size = o.min_bytes; size <= o.max_bytes;
       size = std::max(size + 1, static_cast<std::size_t>(static_cast<double>(size) * o.factor))) {
    const weft::tools::SizeResult r = weft::tools::bench_size(pg, o, size);
    wrong_total += r.wrong;
    busbw_sum += r.busbw;
    ++sizes;
    if (pg.rank() == 0) {
      std::printf("  %12zu %12zu %9s %7s %5d %10.3f %8.3f %8.3f %7ld %10.3f %10.3f\n", r.bytes,
                  r.count, std::string(weft::dtype_name(o.dtype)).c_str(),
                  std::string(weft::dist::reduce_op_name(o.redop)).c_str(), r.root, r.time_us,
                  r.algbw, r.busbw, o.check ? r.wrong : 0L, r.best_us, r.p99_us);
      std::fflush(stdout);
    }
  }
  if (pg.rank() == 0) {
    std::printf("# Out of bounds values : %ld %s\n", wrong_total,
                wrong_total == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %.3f GB/s\n", sizes > 0 ? busbw_sum / sizes : 0.0);
  }
  return wrong_total;
}

// Every rank, on the generic engine over the transport's rings: on shm the first subgroup made
// once the pool of step-engine regions is spent (as a job's later subgroups are).
std::shared_ptr<ProcessGroup> generic_group(ProcessGroup& world) {
  std::vector<int> all(static_cast<std::size_t>(world.size()));
  std::iota(all.begin(), all.end(), 0);
  for (int made = 0; made < 64; ++made) {
    auto group = world.new_group(all);
    if (group->engine_name() == "generic") return group;
    if (group->engine_name() != "shm") break;
  }
  throw CLI::ValidationError("--group generic: the " + std::string(world.backend_name()) +
                             " backend's groups do not run on the generic engine; run it with "
                             "--backend shm or tcp");
}

// The group --group names: the world, the ranks of this rank's host, the ranks with this
// rank's local index, one per host (a tensor- and a data-parallel group of a mesh over whole
// hosts), or every rank on the generic engine. Ranks are numbered host by host, the launcher's
// local world size per host, as weftrun, mpirun and srun number them.
std::shared_ptr<ProcessGroup> bench_group(const std::shared_ptr<ProcessGroup>& world,
                                          const std::string& group) {
  if (group == "all") return world;
  if (group == "generic") return generic_group(*world);
  const auto launched = weft::dist::launch_environment();
  const int per_host = launched ? launched->local_world_size : 0;
  if (per_host <= 0 || world->size() % per_host != 0) {
    throw CLI::ValidationError("--group " + group +
                               " needs a launcher (weftrun, mpirun, srun) that says how many "
                               "ranks each host runs, a number dividing the world size");
  }
  const int rank = world->rank();
  const int color = group == "host" ? rank / per_host : rank % per_host;
  return world->split(color, rank);
}

// Names a lost peer and a timeout, so that scripts (tests/dist/netns) tell them from the rest.
const char* error_kind(const std::exception& e) {
  if (dynamic_cast<const weft::dist::PeerError*>(&e) != nullptr) return "PeerError: ";
  if (dynamic_cast<const weft::TimeoutError*>(&e) != nullptr) return "TimeoutError: ";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("weft-bench: collective benchmarks, nccl-tests' conventions", "weft-bench");
  BenchOptions o;
  std::string min = "8", max = "64M", dtype = "float32", redop = "sum", backend, machine_path;
  int threads = 0;
  double timeout = 0;
  // --help shows each option's default from the variable it sets, never a copy of the value.
  app.option_defaults()->always_capture_default();
  std::vector<std::string> ops = weft::tools::bench_op_names();
  ops.emplace_back("machine");
  ops.emplace_back("tune");
  bool tune = false;
  app.add_option("op", o.op,
                 "The operation to time; machine: the costs weft-estimate reads; tune: as --tune")
      ->check(CLI::IsMember(ops));
  app.add_flag("--tune", tune,
               "Measure where the collectives should change algorithm here and write the table "
               "every job of this backend and rank count reads");
  app.add_option("--out", machine_path,
                 "machine: the JSON file to write (merged by backend); tune: the table (default: "
                 "where jobs read it, $WEFT_COLLECTIVE_TABLE or ~/.cache/weft/collectives)");
  app.add_option("-b,--min-bytes", min, "Smallest size, e.g. 8, 1K, 4M")->type_name("SIZE");
  app.add_option("-e,--max-bytes", max, "Largest size")->type_name("SIZE");
  app.add_option("-f,--step-factor", o.factor, "Size multiplier between steps")
      ->check(CLI::Range(1.01, 1e6));
  app.add_option("-n,--iters", o.iters, "Timed iterations per size")->check(CLI::Range(1, 1000000));
  app.add_option("-w,--warmup-iters", o.warmup, "Untimed iterations first")
      ->check(CLI::Range(0, 1000000));
  app.add_option("-d,--datatype", dtype,
                 "float32, float64, float16, bfloat16, int8, uint8, int32 or int64");
  app.add_option("-o,--op", redop, "Reduction: sum, prod, min, max, avg, band, bor or bxor");
  app.add_option("--backend", backend,
                 "Backend under weftrun; empty: $WEFT_BACKEND, else shm on one host, auto across");
  app.add_option("--threads", threads,
                 "Run N ranks as threads (the thread backend); 0: join a weftrun job instead")
      ->check(CLI::Range(1, 1024));
  app.add_option("--timeout", timeout,
                 "Seconds each collective may wait for its peers; 0: the library's default")
      ->check(CLI::Range(0.0, 1e6));
  app.add_flag("-c,--check", o.check, "Verify every result; exit 1 if any element is wrong");
  app.add_flag("--shared", o.shared,
               "Put the buffers in SharedBuffers, which the shm backend's peers map: its "
               "all-reduce and broadcast then run in place");
  app.add_option("--group", o.group,
                 "Time the collective on: all (the world), host (each host's ranks, all hosts "
                 "at once), cross (the ranks with one local index, one per host), or generic "
                 "(every rank on the generic engine: on shm, a subgroup beyond the pool of "
                 "step-engine regions); host and cross under a launcher (weftrun, mpirun, "
                 "srun) only")
      ->check(CLI::IsMember({"all", "host", "cross", "generic"}));
  CLI11_PARSE(app, argc, argv);
  if (tune && !o.op.empty() && o.op != "tune") {
    std::fprintf(stderr, "weft-bench: --tune takes no operation (given: %s)\n", o.op.c_str());
    return 2;
  }
  if (tune) o.op = "tune";
  if (o.op.empty()) {
    std::fprintf(stderr, "weft-bench: name an operation, machine, or --tune (--help lists them)\n");
    return 2;
  }
  try {
    weft::simd::use_target_from_env();  // WEFT_SIMD_TARGET=AVX2: that vector path
    o.min_bytes = parse_size(min);
    o.max_bytes = parse_size(max);
    if (o.op == weft::dist::op_name(weft::dist::Op::barrier))
      o.min_bytes = o.max_bytes = 0;  // no buffer: one line
    o.dtype = weft::tools::parse_dtype(dtype);
    o.redop = weft::tools::parse_redop(redop);
    long wrong = 0;
    const bool machine = o.op == "machine", tuning = o.op == "tune";
    if (machine && machine_path.empty()) throw CLI::ValidationError("machine needs --out FILE");
    if ((machine || tuning) && o.group != "all")
      throw CLI::ValidationError(o.op + " measures the world group: leave --group out");
    const auto run_op = [&](ProcessGroup& pg) {
      if (tuning) {
        weft::tools::tune_collectives(pg, machine_path, o.min_bytes, o.max_bytes);
      } else if (machine) {
        weft::tools::measure_machine(pg, machine_path);
      } else {
        return run(pg, o);
      }
      return 0L;
    };
    if (threads > 0 && o.group != "all") {
      throw CLI::ValidationError(
          "--group host, cross and generic run under a launcher (weftrun, mpirun, srun), not "
          "--threads (whose groups run on the generic engine already)");
    }
    if (threads > 0) {
      weft::dist::run_threads(threads, [&](ProcessGroup& pg) {
        const long w = run_op(pg);
        if (pg.rank() == 0) wrong = w;
      });
    } else {
      std::optional<weft::Seconds> op_timeout;
      if (timeout > 0) op_timeout = weft::Seconds(timeout);
      auto world = weft::dist::init_process_group({.backend = backend, .timeout = op_timeout});
      auto pg = bench_group(world, o.group);
      wrong = run_op(*pg);
    }
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft-bench: %s%s\n", error_kind(e), e.what());
    return 2;
  }
}
