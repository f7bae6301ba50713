// FullyShardedDataParallel: data parallelism that splits the training state across the
// "dp_shard" group instead of copying it (ZeRO, Rajbhandari et al. 2020; PyTorch FSDP).
//
// Every parameter is cut along its first dimension into one run of ceil(rows / N) rows per
// rank (the last runs padded with zeros, which no user ever sees). Each rank keeps its run of
// every parameter, and the matching gradients and AdamW moments, in flat shard buffers. The
// model's parameters are grouped into units (nn::Llama::unit_of: each transformer block, and
// the root: embedding, final norm and output); the hooks the model calls around each unit's
// forward and backward move data as the mode requires:
//
//   mode        held between steps (per rank, P = parameters)   per unit while in use
//   zero1       params P, grads P, moments 2P/N                  gather and reduction buffers
//   zero2       params P, grads P/N, moments 2P/N                + its full grads (backward)
//   full_shard  params P/N, grads P/N, moments 2P/N              + its full params and grads
//
// - zero1 accumulates full gradients as DDP does and reduce-scatters each unit's once the last
//   micro-batch's backward has finished it; zero2 and full_shard reduce-scatter every
//   micro-batch's gradients of a unit as soon as the unit's backward ends and free them.
// - full_shard gathers a unit's parameters before its forward and again before its backward
//   (the next unit's gather is started while the current one computes) and frees them after
//   each; zero1 and zero2 keep the full parameters and refresh each unit from the updated
//   shards by an all-gather before its first forward after a step.
// - Under mixed precision (set_param_dtype) the weights only products read are gathered in
//   bf16, half their bytes, with the same results.
// - HSDP: with a `replicate` group, each shard's gradients are also summed across the
//   replicas holding the same shard, so replicas stay identical.
// - The optimizer (AdamW, element-wise) updates the shards; clipping sums the squared norm of
//   every shard across the shard group.
//
// Results equal one process's up to the order of floating-point sums (docs/PARALLELISM.md).
// As with DDP, gradients are summed: each rank scales its loss by its share of the global
// batch.
//
// What the model holds is the sharding's working memory, not the training state: under
// full_shard its parameters are released between uses (reading them throws), and under zero1
// and zero2 they lag the shards from step() or load_full_state() until the next forward pass.
// Read the state with full_state(). Destroying this object leaves the model as it is.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weft/dist/process_group.h"
#include "weft/nn/llama.h"
#include "weft/nn/optim.h"
#include "weft/tensor/mappings.h"

namespace weft::parallel {

enum class ShardingMode { kZero1, kZero2, kFullShard };
// "zero1", "zero2" or "full_shard"; InvalidArgument otherwise.
ShardingMode parse_sharding_mode(const std::string& name);
const char* sharding_mode_name(ShardingMode mode);

// Bytes this rank holds for the training state.
struct ShardedMemory {
  std::int64_t parameters = 0, gradients = 0, optimizer = 0;  // kept between steps
  std::int64_t unsharded_peak = 0;  // the most in use at once in units' full copies and buffers
  std::int64_t spare_buffers = 0;   // gather and reduction buffers kept for the next step
  // The most those buffers held at once, the spares included, and in use at once: equal, as
  // spares are dropped rather than raise the peak. How many were ever allocated.
  std::int64_t buffers_peak = 0, buffers_in_use_peak = 0, buffers_made = 0;
  std::int64_t leaf_blocks = 0;  // the layout-invariant mode's blocks of the shards' sums
  std::int64_t one_process = 0;  // what one process holds: 4 bytes x 4 x P (params,
                                 // grads, two moments)
};

class FullyShardedDataParallel {
 public:
  // Collective over `shard` (and `replicate`, if any). Each rank copies its shards out of the
  // model's parameters, which must be the same on every rank (checked under
  // WEFT_DIST_DEBUG=detail), and, as its mode says, frees the full parameters and gradients.
  // Or construct over an uninitialised model and call init_weights().
  FullyShardedDataParallel(nn::Llama& model, dist::ProcessGroup& shard,
                           dist::ProcessGroup* replicate, ShardingMode mode,
                           nn::AdamWOptions optimizer);
  ~FullyShardedDataParallel();
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  // Initialises this rank's shards as model.init_weights(seed) would the whole model, each
  // rank computing only its own rows: the full parameters never exist at once.
  void init_weights(std::uint64_t seed);

  // Zeroes the gradients (the shards, and the full ones zero1 keeps). Call before a step's
  // first micro-batch instead of the model's zero_grad.
  void zero_grad();
  // The next backward is the step's last micro-batch (zero1 reduces only after it; the other
  // modes reduce after every backward).
  void prepare_sync();
  // Pipeline stages run several micro-batches' forwards before their backwards within one
  // step. Pipelined, a unit's parameters stay gathered from its first forward of the step to
  // its last backward, its full gradients add up over the micro-batches, and it is reduced
  // and freed after its last backward only: the runtime holds the reductions during the
  // others (hold_reductions). Set before the first forward.
  void set_pipelined(bool on) { pipelined_ = on; }
  // The gradients' dtype in the reduce-scatter and HSDP's all-reduce: kFloat32 (the default)
  // or kBFloat16 (ParallelOptions::reduce_dtype); InvalidArgument otherwise. Set before the
  // first backward.
  void set_reduce_dtype(DType dtype);
  // The dtype the weights that only matrix products read (nn::Parameter::product_operand)
  // are gathered in (TorchTitan's mixed_precision_param): kFloat32 (the default), or
  // kBFloat16 under mixed precision (while nn::matmul_dtype() is bf16; float32 gathers
  // otherwise): each rank rounds its shard of them to bf16 and the all-gather moves half their
  // bytes; they are widened into the model's float32 tensors, which the products round to the
  // same bf16, so results are bitwise a float32 gather's.
  // Other parameters (norms, the embedding) are gathered in float32 either way.
  // InvalidArgument for other dtypes.
  void set_param_dtype(DType dtype);
  // Layout-invariant training (nn/leaf_sums.h): each rank sends its blocks of leaves' sums, cut
  // by the ranks' rows (one all-to-all per unit instead of the reduce-scatter), and each shard
  // keeps the blocks it receives until finish_sync combines them (and HSDP's replicas' blocks,
  // all-gathered) in the canonical tree. Float32 reductions: InvalidArgument otherwise. Set
  // before the first backward.
  void set_layout_invariant(bool on);
  void hold_reductions(bool held) { held_ = held; }
  // Pipelined: reduces and frees every unit whose reduction was held (zero bubble: after the
  // step's last W, when the weight gradients are final).
  void reduce_held();
  // Waits for every reduction and leaves the summed gradient shards ready for the optimizer.
  void finish_sync();
  // The global L2 norm of the gradients (over every shard); when max_norm > 0, scales them so
  // that it is at most max_norm, as nn::clip_grad_norm. Collective over the shard group.
  double clip_grad_norm(double max_norm);
  // The squared L2 norm of this rank's gradient shards of the parameters `counted` accepts
  // (not summed across ranks), and the scaling clip_grad_norm applies: for callers that
  // combine the norm over more dimensions than the shard group (tensor parallelism).
  double local_grad_sum_squares(const std::function<bool(const nn::Parameter&)>& counted) const;
  void scale_grads(float factor);
  // AdamW on this rank's shards; the units are refreshed lazily by the next forward.
  void step(double lr);
  std::int64_t steps() const { return steps_; }

  // The full training state, in nn::Llama's parameter order (for checkpoints): on rank 0 of
  // the shard group new full tensors, elsewhere empty. Collective over the shard group.
  std::pair<nn::StateDict, nn::AdamWState> full_state();
  // Takes this rank's shards of a full state: every rank passes the same state, before its
  // next forward (not collective). Every parameter must be there with its shape, and nothing
  // else; otherwise InvalidArgument, and nothing is changed.
  void load_full_state(const nn::StateDict& params, const nn::AdamWState& optimizer);

  // This rank's rows of every parameter (the model's order; a parameter with no rows here is
  // left out), with where they live in its shards: what a distributed checkpoint saves and
  // loads without gathering anything. After writing through the pointers, call
  // shards_loaded().
  struct ShardRows {
    const nn::Parameter* param;
    std::int64_t first_row, rows;  // of the parameter (this rank's slice of it, under TP)
    std::int64_t cols;             // floats a row
    float *value, *exp_avg, *exp_avg_sq, *grad;
  };
  std::vector<ShardRows> shard_rows();
  // The shards were overwritten (a checkpoint loaded): the units refresh before their next
  // forward, and the optimizer continues from step `steps`.
  void shards_loaded(std::int64_t steps);

  ShardingMode mode() const { return mode_; }
  ShardedMemory memory() const;

 private:
  struct Piece;
  struct Unit;
  struct Reduction;

  Unit& unit_for(int model_unit) const;
  std::vector<std::pair<const Unit*, const Piece*>> pieces_in_model_order() const;
  void before_forward(int model_unit);
  void after_forward(int model_unit);
  void before_backward(int model_unit);
  void after_backward(int model_unit);
  void pipelined_before_backward(Unit& u);
  void pipelined_after_backward(int model_unit);
  void end_backward(Unit& u);
  void lay_out_bf16_gather(Unit& u);
  void pack_bf16(Unit& u);
  void start_gather(Unit& u);
  void finish_gather(Unit& u);
  void free_parameters(Unit& u);
  void mark_stale();  // after the shards change
  void start_reduction(Unit& u);
  void finish_reduction();
  void reduce_across_replicas();
  void exchange_leaf_blocks(Unit& u);
  void combine_leaf_blocks(Unit& u);
  void combine_leaf_blocks(Unit& u, nn::LeafSums<float>& sums);
  void count_unsharded(std::int64_t bytes);        // + in use, - done with: for memory()
  MappedVector<float> take_buffer(std::size_t n);  // zero-filled; see fsdp.cc
  void give_back(MappedVector<float>&& buffer);
  std::size_t spare_floats() const;

  nn::Llama& model_;
  dist::ProcessGroup& shard_;
  dist::ProcessGroup* replicate_;
  ShardingMode mode_;
  DType reduce_dtype_ = DType::kFloat32, param_dtype_ = DType::kFloat32;
  nn::AdamWOptions options_;
  int ranks_, rank_;
  std::vector<std::unique_ptr<Unit>> units_;  // [0] the root, [1 + l] block l
  std::int64_t shard_size_ = 0;               // elements of every unit's shard, this rank
  MappedVector<float> values_, grads_, exp_avg_, exp_avg_sq_;  // this rank's shards
  std::deque<std::unique_ptr<Reduction>> reductions_;
  // Two gathers (each with its rounded block in bf16) and two reductions in flight.
  static constexpr std::size_t kSpareBuffers = 8;
  std::vector<MappedVector<float>> spare_;
  struct BufferCounts {
    std::size_t in_use = 0;       // floats of the buffers taken and not given back
    std::size_t in_use_peak = 0;  // the most of them at once
    std::size_t peak = 0;         // the most of them and the spares at once
    std::int64_t made = 0;        // buffers allocated rather than taken from the spares
  } buffers_;
  int hooks_ = -1;
  bool syncing_ = false, pipelined_ = false, held_ = false, layout_invariant_ = false;
  std::int64_t steps_ = 0;
  std::int64_t unsharded_ = 0, unsharded_peak_ = 0;
};

}  // namespace weft::parallel
