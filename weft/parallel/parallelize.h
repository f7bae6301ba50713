// parallelize(): one seam for every parallelism, TorchTitan's shape. The trainer builds a
// DeviceMesh from the degrees, and parallelize() cuts the model into pipeline stages, applies
// tensor parallelism to each, then context parallelism, then the data-parallel wrapper (none,
// DDP, FSDP or HSDP), and returns one ParallelModel the step loop drives without knowing which
// strategies are inside; its state() is what checkpoints read and write, its report() what the
// log says. Composition and costs: docs/PARALLELISM.md.
//
//   ParallelDims dims{.dp_shard = 2, .tp = 2};
//   dims.validate(world->size());
//   DeviceMesh mesh(world, dims.mesh_dims());          // [dp_shard 2, tp 2]
//   auto parallel = parallelize(model, &mesh, {.dims = dims});
//   parallel->init_weights(seed);
//   // each step: zero_grad, forward_backward per accumulated batch (prepare_sync before the
//   // last), finish_sync, clip_grad_norm, step, step_loss; checkpoints: parallel->state();
//   // the log: parallel->report()
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "weft/nn/llama.h"
#include "weft/nn/optim.h"
#include "weft/parallel/device_mesh.h"
#include "weft/parallel/fsdp.h"

namespace weft::parallel {

// Degrees along each mesh dimension, TorchTitan's; 1 leaves a dimension out.
struct ParallelDims {
  int pp = 1;            // pipeline parallelism
  int dp_replicate = 1;  // DDP (or HSDP's replicas)
  int dp_shard = 1;      // FSDP
  int cp = 1;            // context parallelism (ring attention)
  int tp = 1;            // tensor (and sequence) parallelism

  // [pp, dp_replicate, dp_shard, cp, tp] in TorchTitan's order, without the dimensions of
  // size 1.
  std::vector<std::pair<std::string, int>> mesh_dims() const;
  int product() const { return pp * dp_replicate * dp_shard * cp * tp; }
  int data_parallel() const { return dp_replicate * dp_shard; }
  // InvalidArgument naming every degree unless they multiply to `world`.
  void validate(int world) const;
};

// How a pipeline-parallel run (dims.pp > 1) cuts the model and streams its micro-batches:
// TorchTitan's [parallelism] pipeline_parallel_* keys.
struct PipelineOptions {
  std::string schedule = "1F1B";  // TorchTitan's names (pipeline_schedule.h)
  std::string schedule_csv;       // a schedule in PyTorch's CSV format (its text); overrides it
  int microbatches = 1;           // per batch: the batch must split into this many equal parts
  // Layers per stage; 0: one stage per rank, two for the interleaved and V schedules.
  int layers_per_stage = 0;
};

struct ParallelOptions {
  ParallelDims dims;
  PipelineOptions pipeline;
  ShardingMode fsdp_mode = ShardingMode::kFullShard;
  std::size_t bucket_bytes = std::size_t{25} << 20;  // DDP's buckets
  // The gradients' dtype in DDP's all-reduce, FSDP's reduce-scatter and HSDP's all-reduce
  // across replicas (TorchTitan's mixed_precision_reduce): kFloat32, or kBFloat16 (each rank's
  // gradients rounded to bf16 before the sum, summed in float32, the sum rounded to bf16 and
  // widened back; half the bytes where the group's engine sums bf16 itself, the mpi backend's).
  // In the layout-invariant mode each node of the gradients' canonical trees is rounded to bf16
  // instead, and the exchanges move bf16 (nn::LeafSums). Gradients are float32 before and after.
  DType reduce_dtype = DType::kFloat32;
  // The dtype FSDP gathers the weights only products read in (TorchTitan's
  // mixed_precision_param; FullyShardedDataParallel::set_param_dtype): kFloat32, or kBFloat16
  // under mixed precision (half the bytes, the same results).
  DType param_dtype = DType::kFloat32;
  bool sequence_parallel = true;                                   // with tp > 1
  bool loss_parallel = true;                                       // with tp > 1
  nn::KeyValueExchange cp_exchange = nn::KeyValueExchange::kRing;  // with cp > 1
  nn::AdamWOptions optimizer;
  // Layout-invariant training (`[training] deterministic = "layout"`, nn/leaf_sums.h): every
  // sum over tokens in the canonical tree over the global batch's sequences, so that the loss,
  // the gradients and the parameters are bitwise those of one process whatever the data-
  // parallel degree, micro-batch count and thread count. Call kernels::set_product_rows with
  // a divisor of a leaf's rows (seq_len / sequence_blocks, at most 512) first. One process, DDP,
  // FSDP (every mode), HSDP and pipelines, reducing in float32; tensor parallelism (with or without
  // sequence and loss parallelism) when its degree divides feature_blocks; context parallelism when
  // twice its degree divides sequence_blocks.
  bool layout_invariant = false;
  // With layout_invariant: the fixed blocks each Linear cuts its tensor-parallel dimension
  // into (nn/feature_blocks.h), a power of two; runs compare bitwise only at the same count.
  // 1: whole products (no tensor parallelism).
  int feature_blocks = 1;
  // With layout_invariant: the fixed blocks of positions each sequence is cut into, each a
  // leaf of the canonical tree (nn/blocked_attention.h), a power of two; context parallelism
  // of degree cp needs a multiple of 2 x cp. 1: whole sequences (no context parallelism).
  int sequence_blocks = 1;
};

// Bytes this rank holds (parameters, gradients and optimizer state between steps; the
// activations the last forward kept), and what one process would hold for the same model.
struct MemoryReport {
  std::int64_t parameters = 0, gradients = 0, optimizer = 0, activations = 0;
  // The layout-invariant mode's partial sums per block of leaves and exchange buffers, held
  // and kept for reuse (0 in the default order).
  std::int64_t canonical_sums = 0;
  std::int64_t one_process = 0;  // 4 x 4 bytes per parameter (values, grads, two moments)
};

// A piece of the training state one rank holds: the box [offsets, offsets + sizes) of the
// whole tensor `name` of shape `shape`. The names are "model.<parameter>",
// "optim.exp_avg.<parameter>" and "optim.exp_avg_sq.<parameter>" (AdamW's moments).
struct StatePiece {
  std::string name;
  Shape shape;
  std::vector<std::int64_t> offsets;
  Shape sizes;
};

// The training state of a parallelized model as checkpoints read and write it: the pieces
// each rank holds, whatever the layout.
class TrainingState {
 public:
  virtual ~TrainingState() = default;
  // The whole training state, in the model's parameter order, gathered: on world rank 0 full
  // tensors, elsewhere empty. Collective. (What one process would hold, to compare layouts
  // with; checkpoints save and load each rank's pieces instead.)
  virtual std::pair<nn::StateDict, nn::AdamWState> full() = 0;
  // The pieces of the training state this rank holds, whatever the layout (tensor-parallel
  // slices, FSDP's rows of them, a pipeline stage's parameters, replicas' copies): the same
  // list on every call. For distributed checkpoints, which save and load them without
  // gathering.
  virtual std::vector<StatePiece> layout() = 0;
  // Copies those pieces, in layout's order, into `into`: contiguous tensors allocated on the
  // first call (when `into` is empty) and reused by later ones, so that a staging buffer kept
  // between checkpoints costs one copy of the state and no new memory.
  virtual void copy(std::vector<Tensor>& into) = 0;
  // Overwrites the pieces (tensors of layout's sizes, in its order) and sets the optimizer's
  // step count. Not collective; every rank loads its own pieces before the next forward.
  // InvalidArgument (nothing changed) when a tensor's shape differs.
  virtual void load(const std::vector<Tensor>& values, std::int64_t optimizer_steps) = 0;
  virtual std::int64_t optimizer_steps() const = 0;
  // The whole model's parameters, names and shapes, in its order (what a checkpoint of this
  // model must hold).
  virtual const std::vector<std::pair<std::string, Shape>>& whole_parameters() const = 0;
  // Throws weft::Error unless the replicas hold bitwise the same parameters (DDP). Collective.
  virtual void check_replicas_identical() = 0;
};

// What a parallelized model reports for the log and the metrics.
class TrainingReport {
 public:
  virtual ~TrainingReport() = default;
  virtual MemoryReport memory() const = 0;
  // Wall seconds this rank was blocked in communication: tensor parallelism's collectives,
  // waiting for pipeline transfers (the bubble included), waiting for the data-parallel
  // reductions in finish_sync, and the norm's and losses' all-reduces (FSDP's parameter
  // gathers inside forward and backward are not counted).
  virtual double communication_seconds() const = 0;
  // Lines for the log: at the start (with_peaks false) one per strategy inside ("tensor
  // parallel 2: ...", "fsdp full_shard: ..."), at the end what FSDP held at its peaks and
  // each rank's pipeline idle share. Collective at the end (every rank calls it; the lines
  // are the same on each).
  virtual std::vector<std::string> describe(bool with_peaks) const = 0;
  // The latest step of the pipeline that holds world rank 0 as it ran (pipeline_report.h);
  // empty without pipeline parallelism. Collective.
  virtual std::string pipeline_timeline_svg() const = 0;
};

// The step protocol the training loop drives, with the model's training state and reports
// beside it.
class ParallelModel {
 public:
  virtual ~ParallelModel() = default;
  virtual nn::Llama& model() = 0;
  // Which slice of each global batch this rank trains on: every rank with the same data
  // coordinates (tensor-parallel peers) feeds the model the same tokens.
  virtual int data_rank() const = 0;
  virtual int data_size() const = 0;
  // The whole model's init (nn::Llama::init_weights), each rank computing only its part.
  virtual void init_weights(std::uint64_t seed) = 0;
  // Before a step's first micro-batch.
  virtual void zero_grad() = 0;
  // Forward and backward of one batch, tokens and targets [batch, seq] (this rank's data
  // slice; every pipeline, context- and tensor-parallel peer passes the same): every gradient
  // += d(loss_scale x mean loss) / d(parameter). Returns the mean loss where this rank
  // computes it (the last pipeline stage), else 0: sum_over_data counts it once. Under
  // context parallelism each rank computes its chunks of the sequences and returns its share
  // of the mean (the mean over its tokens / cp), which sum_over_data adds up.
  virtual double forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                                  std::int64_t batch, std::int64_t seq, double loss_scale) = 0;
  // The mean loss of a batch, forward only; 0 where forward_backward returns 0.
  virtual double evaluate(const std::int32_t* tokens, const std::int32_t* targets,
                          std::int64_t batch, std::int64_t seq) = 0;
  // Before the last batch's forward_backward; finish_sync after it, before the norm and step.
  virtual void prepare_sync() = 0;
  virtual void finish_sync() = 0;
  // The L2 norm of the whole model's gradients, over every mesh dimension; when max_norm > 0
  // scales them so that it is at most max_norm. Collective.
  virtual double clip_grad_norm(double max_norm) = 0;
  virtual void step(double lr) = 0;
  // The sum over the data-parallel ranks of a value that forward_backward or evaluate
  // returned (a loss): taken once per data-parallel rank, from the last pipeline stage's
  // first tensor-parallel rank. Collective.
  virtual double sum_over_data(double value) = 0;
  // The step's mean loss, after finish_sync: sum_over_data(shares) of the shares of it that
  // forward_backward returned (each times its loss_scale), or in the layout-invariant mode
  // the canonical sum of every token's loss over the global batch's tokens. Collective.
  virtual double step_loss(double shares) = 0;

  virtual TrainingState& state() = 0;
  virtual const TrainingReport& report() const = 0;
};

// Applies the strategies `options` names to `model` over `mesh` (null: one process, no
// parallelism); options.layout_invariant chooses the step protocol whose sums are canonical. The
// model must be freshly constructed: nothing may hold its parameters yet, except an earlier
// result for a replicated layout (DDP alone, which leaves the model as it found it once
// destroyed: in-place recovery parallelizes the same model again). `model` and `mesh` outlive
// the result.
std::unique_ptr<ParallelModel> parallelize(nn::Llama& model, DeviceMesh* mesh,
                                           const ParallelOptions& options);

}  // namespace weft::parallel
