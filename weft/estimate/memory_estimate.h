// What each rank of a training job will hold, computed from the configuration alone: nothing
// is allocated, so a 405B model on 1,024 ranks estimates on a laptop in milliseconds.
//
//   estimate::Job job{.model = config.model, .options = parallel_options(config, world),
//                     .batch = 8, .seq = 256};
//   for (const estimate::RankMemory& m : estimate::estimate_memory(job)) ... m.total() ...
//
// The figures follow weft's own tensors (nn/, parallel/): the parameters, gradients and
// optimizer state each layout keeps between steps and the activations a forward keeps for
// backward (a pipeline's peak over its schedule) to the byte, as parallel::MemoryReport counts
// them; the buffers the layers keep between steps and what a step holds for a moment
// (activation checkpointing's recomputation, FSDP's whole units and reductions) as a model of
// the code. How close the total comes to the measured peak, and what it leaves out:
// docs/ESTIMATE.md.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "weft/nn/llama.h"
#include "weft/parallel/parallelize.h"

namespace weft::estimate {

// A training job as the estimate sees it.
struct Job {
  nn::LlamaConfig model;
  // The degrees, FSDP's mode, the pipeline's schedule and micro-batches, sequence and loss
  // parallelism; param_dtype kBFloat16 means bfloat16 products (mixed_precision_param).
  parallel::ParallelOptions options;
  std::int64_t batch = 8;  // sequences per forward on each data-parallel rank (batch_size)
  std::int64_t seq = 256;  // positions per sequence (seq_len)
  bool activation_checkpointing = false;
  // The process itself: code, libraries, the data's tokens, the transport, oneDNN's kernels
  // (weft-train's peak resident memory beyond its tensors with a one-layer model of width 32,
  // a rank of 2, x86-64 Debian 12). weft-train measures its own instead (docs/ESTIMATE.md).
  std::int64_t program = std::int64_t{32} << 20;
  // The transport's ring for point-to-point messages from one rank to another on a host, whose
  // pages a pipeline's transfers and context parallelism's ring touch as they stream through:
  // p2p_ring_bytes(backend), the shm backend's by default.
  std::int64_t p2p_ring_bytes = std::int64_t{1} << 20;
};

// The point-to-point ring of `backend` ("shm", and "auto" within a host: ShmTransportOptions's
// ring_bytes); 0 for the transports without one (tcp, mpi, threads).
std::int64_t p2p_ring_bytes(std::string_view backend);

// Bytes one rank holds.
struct RankMemory {
  int rank = 0;   // in the world
  int stage = 0;  // pipeline rank (0 without pipeline parallelism)
  // Between steps, as parallel::MemoryReport counts them.
  std::int64_t parameters = 0, gradients = 0, optimizer = 0;
  // Kept by forward for backward at the most (MemoryReport::activations).
  std::int64_t activations = 0;
  // Kept between steps: the layers' buffers for backward and collectives, DDP's buckets, a
  // pipeline stage's own activation tensors and transfer buffers, the transport's rings that
  // point-to-point messages pass through.
  std::int64_t scratch = 0;
  // Held for a moment on top: activation checkpointing's recomputed block, FSDP's whole units
  // and reductions in flight.
  std::int64_t working = 0;
  std::int64_t program = 0;  // Job::program

  std::int64_t state() const { return parameters + gradients + optimizer; }
  // The peak resident memory the rank should reach.
  std::int64_t total() const { return state() + activations + scratch + working + program; }
};

// One entry per world rank (dims.product() of them), in rank order. InvalidArgument when the
// model's sizes do not fit together or the tensor-parallel degree cannot split them
// (nn::LlamaConfig::validate, validate_tensor_parallel), or the pipeline's schedule does not
// fit its degree and layers; other layout errors are parallelize()'s to find.
std::vector<RankMemory> estimate_memory(const Job& job);

}  // namespace weft::estimate
