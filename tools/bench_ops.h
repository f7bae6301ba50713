// weft-bench's operations: buffers, timing and checks for one size. Not a library API.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/dist.h"

namespace weft::tools {

struct BenchOptions {
  std::string op;
  std::size_t min_bytes = 8;
  std::size_t max_bytes = 64 << 20;
  double factor = 2;
  int iters = 20;
  int warmup = 5;
  DType dtype = DType::kFloat32;
  dist::ReduceOp redop = dist::ReduceOp::kSum;
  bool check = false;
  std::string group = "all";  // --group: all, host, cross or generic
  bool shared = false;        // --shared: the buffers are dist::SharedBuffers
  // Run before each iteration instead of a barrier (untimed): the ranks then arrive as that
  // work lets them, as in training (weft-bench machine times collectives after compute).
  std::function<void()> between;
};

struct SizeResult {
  std::size_t bytes = 0;  // of the largest buffer
  std::size_t count = 0;  // its elements
  int root = -1;
  double time_us = 0;  // median over iterations, slowest rank
  double best_us = 0;  // the fastest iteration, slowest rank
  double p99_us = 0;   // the 99th percentile (nearest rank), slowest rank
  double algbw = 0;    // GB/s
  double busbw = 0;    // GB/s
  long wrong = 0;      // elements that differ from the expected values, all ranks
};

// The operations weft-bench times: collectives by their names in weft/dist/op.h, and
// kSendRecv, weft-bench's own (each rank sends to the next and receives from the previous).
inline constexpr std::string_view kSendRecv = "sendrecv";
std::vector<std::string> bench_op_names();
DType parse_dtype(const std::string& name);
dist::ReduceOp parse_redop(const std::string& name);

// Times `o.op` at `bytes` (rounded down to whole elements, and to a multiple of the group
// size where the operation splits its buffer); collective over `pg`.
SizeResult bench_size(dist::ProcessGroup& pg, const BenchOptions& o, std::size_t bytes);

}  // namespace weft::tools
