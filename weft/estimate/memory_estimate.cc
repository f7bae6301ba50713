#include "weft/estimate/memory_estimate.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "weft/dist/shm/shm_transport.h"
#include "weft/estimate/layout.h"
#include "weft/parallel/pipeline_schedule.h"
#include "weft/tensor/tensor.h"

namespace weft::estimate {
namespace {

// What one forward of `rows` rows (sequences x this rank's positions) keeps in one block, as
// TransformerBlock, Attention and FeedForward count it.
std::int64_t block_activations(const Widths& w, std::int64_t rows, bool checkpointing) {
  const std::int64_t local = w.local_rows(rows);
  if (checkpointing) return local * w.dim * kFloat;  // the input alone
  const std::int64_t norms = 2 * local * (w.dim * (kFloat + w.operand) + kFloat);
  const std::int64_t attention =
      rows * (w.qkv() + w.heads * w.head_dim) * w.operand + rows * w.heads * kFloat;
  const std::int64_t ffn = rows * 3 * w.hidden * w.operand;
  return norms + attention + ffn;
}

// The final norm, the output layer and the loss (Llama's head).
std::int64_t head_activations(const Widths& w, std::int64_t rows, bool pipelined) {
  const std::int64_t local = w.local_rows(rows);
  std::int64_t n = local * (2 * w.dim + 1) * kFloat + rows * w.vocab * kFloat;
  if (w.sequence_sharded) n += rows * w.dim * kFloat;  // the norm's output, gathered
  if (w.gathered_logits) n += rows * w.vocab * w.tp * kFloat;
  if (pipelined && w.tp > 1) n += rows * kFloat;  // the loss's row maxima
  return n;
}

// A zero-bubble I's copies for its W (DeferredWeightGrads): the output gradients that the
// backward goes on to overwrite, and the gathered inputs under sequence parallelism (what
// the I keeps until its W besides the activations).
std::int64_t block_deferred(const Widths& w, std::int64_t rows) {
  std::int64_t n = 2 * rows * w.dim * kFloat + rows * w.qkv() * w.operand;
  if (w.operand == 2) n += rows * 2 * w.hidden * w.operand;
  if (w.sequence_sharded) n += 2 * rows * w.dim * w.operand;
  return n;
}

// Buffers the blocks share (nn::BlockScratch): backward's gradients of a block's activations.
std::int64_t block_scratch(const Widths& w, std::int64_t rows) {
  return rows * (w.qkv() + w.heads * w.head_dim + w.hidden) * kFloat +
         w.local_rows(rows) * w.dim * kFloat;
}

std::int64_t head_scratch(const Widths& w, std::int64_t rows) {
  std::int64_t n = rows * kFloat + rows * w.vocab * w.operand + rows * w.dim * kFloat;
  if (w.tp > 1) n += w.local_rows(rows) * w.dim * kFloat;  // the norm's input gradient
  if (w.gathered_logits) n += rows * w.vocab * w.tp * kFloat;
  return n;
}

// Tensor parallelism's buffers (nn/tensor_parallel.h): a partial sum, and under sequence
// parallelism its reduce-scattered rows and the gathered rows (an operand, and a gradient).
std::int64_t tensor_parallel_scratch(const Widths& w, std::int64_t rows) {
  if (w.tp == 1) return 0;
  std::int64_t n = rows * w.dim * kFloat;
  if (w.sequence_sharded)
    n += w.local_rows(rows) * w.dim * kFloat + rows * w.dim * (w.operand + kFloat);
  return n;
}

// Context parallelism's ring (nn::RingScratch, shared by the blocks): this rank's keys and
// values and one other rank's (all of them when all-gathered), their gradients, and one query
// chunk's partial output, log-sum-exp and gradients.
std::int64_t context_parallel_scratch(const Widths& w, std::int64_t rows, const Job& job) {
  const int cp = job.options.dims.cp;
  if (cp == 1 || job.options.layout_invariant) return 0;
  const std::int64_t kv = rows * 2 * w.kv_heads * w.head_dim, chunk = rows / 2;
  const std::int64_t blocks = job.options.cp_exchange == nn::KeyValueExchange::kRing ? 2 : 1 + cp;
  return blocks * kv * (w.operand + kFloat) +
         chunk * (w.heads * w.head_dim + w.heads + w.qkv() + 2 * w.kv_heads * w.head_dim) * kFloat;
}

struct Stage {
  nn::LayerRange layers;
  std::int64_t saved = 0, deferred = 0;  // one micro-batch's
};

// A pipeline rank's activations over its actions in order (PipelineRuntime): `held`, the
// most its slots keep at once (an F adds its stage's activations, a B frees them, an I adds
// the deferred copies, which its W frees with the activations: the runtime's accounting), and
// `with_sets`, the most with the stages' other sets of activation buffers: the one the model
// fills in a forward and the spent ones kept for the next forwards. A forward takes a spent set
// for the model, if there is one (else the next forward makes a new one); a B or W gives its
// set back, unless its I recomputed whole blocks into it (checkpointing), which is freed. Sets
// persist from step to step, so the second of two steps is the one that counts.
struct PipelinePeaks {
  std::int64_t held = 0, with_sets = 0;
};

PipelinePeaks pipeline_peaks(const std::vector<parallel::Action>& actions,
                             const std::vector<Stage>& stages, bool checkpointing) {
  std::vector<std::int64_t> spent(stages.size(), 0), model_has(stages.size(), 0);
  PipelinePeaks peaks;
  for (int step = 0; step < 2; ++step) {
    std::int64_t held = 0;
    for (const parallel::Action& a : actions) {
      const auto stage = static_cast<std::size_t>(a.stage);
      const Stage& s = stages[stage];
      switch (a.kind) {
        case parallel::ActionKind::kForward:
          held += s.saved;
          model_has[stage] = spent[stage] > 0 ? 1 : 0;
          spent[stage] -= model_has[stage];
          break;
        case parallel::ActionKind::kFullBackward:
          held -= s.saved;
          ++spent[stage];
          break;
        case parallel::ActionKind::kBackwardInput:
          held += s.deferred;
          break;
        case parallel::ActionKind::kBackwardWeight:
          held -= s.saved + s.deferred;
          if (!checkpointing) ++spent[stage];
          break;
        default:
          break;
      }
      std::int64_t sets = 0;
      for (std::size_t t = 0; t < stages.size(); ++t)
        sets += (spent[t] + model_has[t]) * stages[t].saved;
      peaks.held = std::max(peaks.held, held);
      peaks.with_sets = std::max(peaks.with_sets, held + sets);
    }
  }
  return peaks;
}

// The transport's rings a rank's point-to-point messages stream through (Job::p2p_ring_bytes
// each): into every peer it sends to and from every one it receives from, which is both ways
// between a pipeline rank and each rank holding a stage next to one of its own (activations
// one way, gradients the other), and context parallelism's ring (to the next rank, from the
// previous one). Their pages are touched in the run, not before the program's share is measured.
std::int64_t p2p_rings(const Job& job, const parallel::Schedule* schedule, int rank) {
  std::set<int> pipeline_peers;
  if (schedule != nullptr) {
    const std::vector<int>& at = schedule->stage_to_rank;
    for (std::size_t s = 0; s + 1 < at.size(); ++s) {
      if (at[s] == rank && at[s + 1] != rank) pipeline_peers.insert(at[s + 1]);
      if (at[s + 1] == rank && at[s] != rank) pipeline_peers.insert(at[s]);
    }
  }
  const bool cp_ring = job.options.dims.cp > 1 && !job.options.layout_invariant &&
                       job.options.cp_exchange == nn::KeyValueExchange::kRing;
  const auto rings = static_cast<std::int64_t>(2 * pipeline_peers.size() + (cp_ring ? 2 : 0));
  return rings * job.p2p_ring_bytes;
}

// Each (stage, micro-batch) slot's input and gradient buffers on a pipeline rank
// (PipelineRuntime).
std::int64_t pipeline_scratch(const Widths& w, std::int64_t rows,
                              const parallel::Schedule& schedule, int rank) {
  std::int64_t n = 0;
  for (const int r : schedule.stage_to_rank)
    if (r == rank) n += 2 * schedule.microbatches * w.local_rows(rows) * w.dim * kFloat;
  return n;
}

// FSDP's working memory in backward, from its sequence of events (parallel/fsdp.cc): the
// unit in backward whole (values and gradients), the next one's gather in flight, and up to
// three reductions (each a whole unit to reduce-scatter and a shard to receive); the root
// stays whole for the step; released units (tensor/mappings.h) and spare buffers
// (FullyShardedDataParallel::take_buffer) are kept for reuse only within the peak, so they add
// nothing to it. Under pipeline parallelism
// every unit stays whole from its first forward to its last backward of the step. Without
// full_shard the values are already counted in the state and nothing is gathered; with zero1
// the gradients too.
std::int64_t fsdp_working(const Job& job, const std::vector<std::int64_t>& units,
                          std::int64_t shards) {
  const parallel::ShardingMode mode = job.options.fsdp_mode;
  std::int64_t whole = 2;  // values and gradients
  if (mode != parallel::ShardingMode::kFullShard) whole = 1;
  if (mode == parallel::ShardingMode::kZero1) whole = 0;
  const std::int64_t root = units[0], block = *std::max_element(units.begin() + 1, units.end());
  const std::int64_t reductions = 3 * (block + block / shards);
  std::int64_t blocks = 0;
  for (std::size_t u = 1; u < units.size(); ++u) blocks += units[u];
  if (job.options.dims.pp > 1) return whole * (root + blocks) + reductions;
  const std::int64_t gather = mode == parallel::ShardingMode::kFullShard ? block : 0;
  return whole * (block + root) + gather + reductions;
}

// The state a rank keeps between steps, as the data-parallel wrappers count it (DDP's
// buckets as scratch), and FSDP's working memory.
void add_state(const Job& job, const std::vector<LocalParameter>& params, RankMemory& m) {
  const parallel::ParallelDims& d = job.options.dims;
  std::int64_t numel = 0, shard = 0;
  const std::int64_t shards = static_cast<std::int64_t>(d.dp_shard) * d.cp;
  std::vector<std::int64_t> units(static_cast<std::size_t>(job.model.n_layers) + 1, 0);
  for (const LocalParameter& p : params) {
    numel += p.rows * p.cols;
    const std::int64_t padded = (p.rows + shards - 1) / shards * p.cols;
    shard += padded;
    units[static_cast<std::size_t>(p.unit)] += padded * shards * kFloat;
  }
  if (d.dp_shard == 1) {
    m.parameters = m.gradients = numel * kFloat;
    m.optimizer = 2 * numel * kFloat;
    if (d.dp_replicate * d.cp > 1 && !job.options.layout_invariant)
      m.scratch += numel * (job.options.reduce_dtype == DType::kBFloat16 ? 2 : kFloat);
    return;
  }
  const parallel::ShardingMode mode = job.options.fsdp_mode;
  m.parameters = (shard + (mode == parallel::ShardingMode::kFullShard ? 0 : numel)) * kFloat;
  m.gradients = (shard + (mode == parallel::ShardingMode::kZero1 ? numel : 0)) * kFloat;
  m.optimizer = 2 * shard * kFloat;
  m.working += fsdp_working(job, units, shards);
}

// What one forward keeps in each of the pipeline's stages (one without pipeline parallelism).
struct Stages {
  std::vector<Stage> stages;
  parallel::Schedule schedule;  // with pipeline parallelism
  std::int64_t rows = 0;        // of one forward: its sequences x this rank's positions
  const std::vector<ModelParameter>* parameters = nullptr;  // the whole model's
};

Stages saved_by_stage(const Job& job, const Widths& w, const StageCut& cut) {
  const int n_layers = static_cast<int>(job.model.n_layers);
  Stages out{{}, cut.schedule, cut.rows, &cut.parameters};
  for (const nn::LayerRange& r : cut.stages) out.stages.push_back({r});
  for (Stage& s : out.stages) {
    for (int l = s.layers.first; l < s.layers.last; ++l) {
      s.saved += block_activations(w, out.rows, job.activation_checkpointing);
      s.deferred += block_deferred(w, out.rows);
      // With checkpointing an I's recomputed activations stay for its W.
      if (job.activation_checkpointing)
        s.deferred += block_activations(w, out.rows, false) - block_activations(w, out.rows, true);
    }
    if (s.layers.last == n_layers) {
      s.saved += head_activations(w, out.rows, job.options.dims.pp > 1);
      s.deferred += out.rows * w.vocab * w.operand;
    }
  }
  return out;
}

// Whether pipeline rank `rank` splits its backwards into I and W (zero bubble).
bool splits_backward(const Job& job, const parallel::Schedule& schedule, int rank) {
  if (job.options.dims.pp == 1) return false;
  const auto& actions = schedule.actions[static_cast<std::size_t>(rank)];
  return std::any_of(actions.begin(), actions.end(), [](const parallel::Action& a) {
    return a.kind == parallel::ActionKind::kBackwardInput;
  });
}

// What pipeline rank `stage` (every rank without pipeline parallelism) holds.
RankMemory pipeline_rank_memory(const Job& job, const Widths& w, const Stages& cut, int stage) {
  const parallel::ParallelDims& d = job.options.dims;
  const std::int64_t rows = cut.rows;
  RankMemory m;
  m.stage = stage;
  std::vector<nn::LayerRange> mine;
  int layers = 0;
  bool head = false;
  for (std::size_t s = 0; s < cut.stages.size(); ++s) {
    if (d.pp > 1 && cut.schedule.stage_to_rank[s] != stage) continue;
    const nn::LayerRange r = cut.stages[s].layers;
    mine.push_back(r);
    layers += r.last - r.first;
    head = head || r.last == job.model.n_layers;
  }
  add_state(job,
            local_parameters(*cut.parameters, static_cast<int>(job.model.n_layers), mine, d.tp), m);
  m.activations = cut.stages[0].saved + w.local_rows(rows) * w.dim * kFloat;
  m.scratch += (layers > 0 ? block_scratch(w, rows) : 0) + (head ? head_scratch(w, rows) : 0) +
               tensor_parallel_scratch(w, rows) + context_parallel_scratch(w, rows, job);
  if (d.pp > 1) {
    const PipelinePeaks peaks =
        pipeline_peaks(cut.schedule.actions[static_cast<std::size_t>(stage)], cut.stages,
                       job.activation_checkpointing);
    m.activations = peaks.held;
    m.scratch += peaks.with_sets - peaks.held + pipeline_scratch(w, rows, cut.schedule, stage);
  }
  m.scratch += p2p_rings(job, d.pp > 1 ? &cut.schedule : nullptr, stage);
  // Backward recomputes a block's forward into a copy of its input: a B frees the
  // recomputation after the block, a zero-bubble I keeps it for its W (in the deferred copies).
  if (job.activation_checkpointing && layers > 0) {
    m.working += w.local_rows(rows) * w.dim * kFloat;
    if (!splits_backward(job, cut.schedule, stage))
      m.working += block_activations(w, rows, false) - block_activations(w, rows, true);
  }
  m.program = job.program;
  return m;
}

}  // namespace

std::int64_t p2p_ring_bytes(std::string_view backend) {
  if (backend != "shm" && backend != "auto") return 0;
  return static_cast<std::int64_t>(dist::ShmTransportOptions{}.ring_bytes);
}

// The ranks of one pipeline rank hold the same: the mesh is [pp, ...], so world rank r is
// pipeline rank r / (world / pp).
std::vector<RankMemory> estimate_memory(const Job& job) {
  const parallel::ParallelDims& d = job.options.dims;
  const StageCut stages = cut_stages(job);
  const Widths w(job.model, job.options);
  const Stages cut = saved_by_stage(job, w, stages);
  std::vector<RankMemory> per_stage;
  for (int stage = 0; stage < d.pp; ++stage)
    per_stage.push_back(pipeline_rank_memory(job, w, cut, stage));
  std::vector<RankMemory> out;
  const int per_pipeline_rank = d.product() / d.pp;
  for (int rank = 0; rank < d.product(); ++rank) {
    out.push_back(per_stage[static_cast<std::size_t>(rank / per_pipeline_rank)]);
    out.back().rank = rank;
  }
  return out;
}

}  // namespace weft::estimate
