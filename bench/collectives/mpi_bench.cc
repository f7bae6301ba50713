// The Open MPI side of bench/collectives/compare.sh and p2p.sh: MPI_Allreduce (float sum),
// MPI_Bcast, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Barrier and MPI_Sendrecv (to the next
// rank, from the previous: weft-bench's sendrecv) swept over sizes like weft-bench,
// printing "op size time_us busbw best_us p99_us" lines (median, best and 99th percentile of
// the timed iterations, each on the slowest rank;
// nccl-tests' sizes and busbw: the whole output of all_gather, the whole input of
// reduce_scatter). Built by compare.sh with mpicxx; not part of weft's build.
//
//   mpi_bench [-n ITERS] [-e MAX_BYTES] OP...     (defaults: 20 iterations, 64 MiB)
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// The median, best and 99th percentile (nearest rank) of the timed iterations, each the
// slowest rank's.
struct Stats {
  double median, best, p99;
};
Stats slowest_stats(std::vector<double>& times) {
  std::sort(times.begin(), times.end());
  const auto p99 = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(times.size())));
  double local[3] = {times[times.size() / 2], times.front(),
                     times[std::max<std::size_t>(p99, 1) - 1]};
  double slowest[3];
  MPI_Allreduce(local, slowest, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return {slowest[0], slowest[1], slowest[2]};
}

void sweep(const std::string& op, int rank, int n, int iters, int warmup, std::size_t max_bytes) {
  for (std::size_t bytes = 4; bytes <= max_bytes; bytes *= 4) {
    std::size_t count = op == "barrier" ? 0 : bytes / sizeof(float);
    const bool blocks = op == "all_gather" || op == "reduce_scatter";
    if (blocks) count -= count % static_cast<std::size_t>(n);  // n equal blocks
    if (blocks && count == 0) continue;
    const int block = static_cast<int>(count / static_cast<std::size_t>(n));
    std::vector<float> buf(std::max<std::size_t>(count, 1), 1.0f);
    std::vector<float> part(std::max(block, 1), 1.0f);
    std::vector<float> got(op == "sendrecv" ? std::max<std::size_t>(count, 1) : 0);
    std::vector<double> times;
    for (int it = 0; it < warmup + iters; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      if (op == "all_reduce") {
        MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      } else if (op == "broadcast") {
        MPI_Bcast(buf.data(), static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
      } else if (op == "all_gather") {
        MPI_Allgather(part.data(), block, MPI_FLOAT, buf.data(), block, MPI_FLOAT, MPI_COMM_WORLD);
      } else if (op == "reduce_scatter") {
        MPI_Reduce_scatter_block(buf.data(), part.data(), block, MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD);
      } else if (op == "sendrecv") {
        MPI_Sendrecv(buf.data(), static_cast<int>(count), MPI_FLOAT, (rank + 1) % n, 0, got.data(),
                     static_cast<int>(count), MPI_FLOAT, (rank + n - 1) % n, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
      } else {
        MPI_Barrier(MPI_COMM_WORLD);
      }
      if (it >= warmup) times.push_back((MPI_Wtime() - start) * 1e6);
    }
    const Stats t = slowest_stats(times);
    const double us = t.median;
    const double algbw = us > 0 ? static_cast<double>(count * sizeof(float)) / (us * 1e3) : 0;
    const double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : blocks ? 1.0 * (n - 1) / n : 1.0;
    if (rank == 0) {
      std::printf("%s %zu %.3f %.3f %.3f %.3f\n", op.c_str(), count * sizeof(float), us,
                  algbw * factor, t.best, t.p99);
    }
    if (op == "barrier") break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int iters = 20;
  std::size_t max_bytes = std::size_t{64} << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-n" && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "-e" && i + 1 < argc) {
      max_bytes = std::strtoull(argv[++i], nullptr, 10);
    } else {
      sweep(arg, rank, n, iters, 5, max_bytes);
    }
  }
  MPI_Finalize();
  return 0;
}
