// The Gloo side of bench/collectives/compare.sh: Gloo's C++ library (Debian libgloo-dev) over
// its tcp transport on loopback, the library torch.distributed's gloo backend wraps, without
// Python in between. gloo::allreduce (float sum; its default ring), gloo::broadcast,
// gloo::allgather, ReduceScatterHalvingDoubling and gloo::barrier swept over sizes like
// weft-bench, printing "op size time_us busbw best_us p99_us" lines (median, best and 99th
// percentile of the timed iterations, each on the slowest rank; nccl-tests' sizes and busbw). Rank
// and size come from RANK and WORLD_SIZE, so weftrun launches it; the ranks meet in a FileStore
// directory. Built by compare.sh with g++; not part of weft's build.
//
//   weftrun --nproc-per-node N gloo_cpp_bench STORE_DIR [-n ITERS] [-e MAX_BYTES] OP...
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using Context = std::shared_ptr<gloo::Context>;

void barrier(const Context& ctx) {
  gloo::BarrierOptions opts(ctx);
  gloo::barrier(opts);
}

// The median, best and 99th percentile (nearest rank) of the timed iterations, each the
// slowest rank's.
struct Stats {
  double median, best, p99;
};
Stats slowest_stats(const Context& ctx, std::vector<double>& times) {
  std::sort(times.begin(), times.end());
  const auto p99 = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(times.size())));
  double stats[3] = {times[times.size() / 2], times.front(),
                     times[std::max<std::size_t>(p99, 1) - 1]};
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(stats, 3);
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
  gloo::allreduce(opts);
  return {stats[0], stats[1], stats[2]};
}

void run_once(const Context& ctx, const std::string& op, std::vector<float>& buf,
              std::vector<float>& part, std::size_t count, int block) {
  const int n = ctx->size;
  if (op == "all_reduce") {
    gloo::AllreduceOptions opts(ctx);
    opts.setOutput(buf.data(), count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
  } else if (op == "broadcast") {
    gloo::BroadcastOptions opts(ctx);
    opts.setOutput(buf.data(), count);
    opts.setRoot(0);
    gloo::broadcast(opts);
  } else if (op == "all_gather") {
    gloo::AllgatherOptions opts(ctx);
    opts.setInput(part.data(), static_cast<std::size_t>(block));
    opts.setOutput(buf.data(), count);
    gloo::allgather(opts);
  } else if (op == "reduce_scatter") {
    // In place: rank r's block of `buf` ends reduced (as MPI_Reduce_scatter_block's output).
    gloo::ReduceScatterHalvingDoubling<float> rs(ctx, {buf.data()}, static_cast<int>(count),
                                                 std::vector<int>(n, block));
    rs.run();
  } else {
    barrier(ctx);
  }
}

void sweep(const Context& ctx, const std::string& op, int iters, std::size_t max_bytes) {
  const int n = ctx->size;
  constexpr int kWarmup = 5;
  for (std::size_t bytes = 4; bytes <= max_bytes; bytes *= 4) {
    std::size_t count = op == "barrier" ? 0 : bytes / sizeof(float);
    const bool blocks = op == "all_gather" || op == "reduce_scatter";
    if (blocks) count -= count % static_cast<std::size_t>(n);
    if (blocks && count == 0) continue;
    const int block = static_cast<int>(count / static_cast<std::size_t>(n));
    std::vector<float> buf(std::max<std::size_t>(count, 1), 1.0f);
    std::vector<float> part(std::max(block, 1), 1.0f);
    std::vector<double> times;
    for (int it = 0; it < kWarmup + iters; ++it) {
      barrier(ctx);
      const auto start = std::chrono::steady_clock::now();
      run_once(ctx, op, buf, part, count, block);
      const std::chrono::duration<double, std::micro> took =
          std::chrono::steady_clock::now() - start;
      if (it >= kWarmup) times.push_back(took.count());
    }
    const Stats t = slowest_stats(ctx, times);
    const double us = t.median;
    const double algbw = us > 0 ? static_cast<double>(count * sizeof(float)) / (us * 1e3) : 0;
    const double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : blocks ? 1.0 * (n - 1) / n : 1.0;
    if (ctx->rank == 0) {
      std::printf("%s %zu %.3f %.3f %.3f %.3f\n", op.c_str(), count * sizeof(float), us,
                  algbw * factor, t.best, t.p99);
      std::fflush(stdout);
    }
    if (op == "barrier") break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::getenv("RANK") || !std::getenv("WORLD_SIZE")) {
    std::fprintf(stderr, "usage: weftrun ... gloo_cpp_bench STORE_DIR [-n I] [-e BYTES] OP...\n");
    return 2;
  }
  const int rank = std::atoi(std::getenv("RANK"));
  const int size = std::atoi(std::getenv("WORLD_SIZE"));
  gloo::rendezvous::FileStore store(argv[1]);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  auto device = gloo::transport::tcp::CreateDevice("127.0.0.1");
  context->connectFullMesh(store, device);
  int iters = 20;
  std::size_t max_bytes = std::size_t{64} << 20;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-n" && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "-e" && i + 1 < argc) {
      max_bytes = std::strtoull(argv[++i], nullptr, 10);
    } else {
      sweep(context, arg, iters, max_bytes);
    }
  }
  return 0;
}
