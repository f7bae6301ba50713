#include "weft/estimate/memory_estimate.h"

#include <algorithm>
#include <string>
#include <utility>

#include "weft/parallel/pipeline.h"
#include "weft/parallel/pipeline_schedule.h"

namespace weft::estimate {
namespace {

constexpr std::int64_t kFloat = 4;

// The sizes one rank's layers work with, tensor parallelism's slices taken.
struct Widths {
  std::int64_t dim, head_dim, heads, kv_heads, hidden, vocab;  // this rank's
  std::int64_t tp;
  bool sequence_sharded;  // sequence parallelism: the residual stream's rows split over tp
  bool gathered_logits;   // tensor parallelism without loss parallelism
  std::int64_t operand;   // bytes of what products read: 2 in bfloat16, 4 in float32

  Widths(const nn::LlamaConfig& c, const parallel::ParallelOptions& o)
      : dim(c.dim),
        head_dim(c.dim / c.n_heads),
        heads(c.n_heads / o.dims.tp),
        kv_heads(c.kv_heads() / o.dims.tp),
        hidden(c.hidden_dim() / o.dims.tp),
        vocab(c.vocab_size / o.dims.tp),
        tp(o.dims.tp),
        sequence_sharded(o.dims.tp > 1 && o.sequence_parallel),
        gathered_logits(o.dims.tp > 1 && !o.loss_parallel && !o.layout_invariant),
        operand(o.param_dtype == DType::kBFloat16 ? 2 : 4) {}

  std::int64_t qkv() const { return (heads + 2 * kv_heads) * head_dim; }
  std::int64_t local_rows(std::int64_t rows) const { return sequence_sharded ? rows / tp : rows; }
};

// The whole model's parameters this pipeline rank holds (its stages' layers, the embedding
// with layer 0, the final norm and the output layer with the last), as this tensor-parallel
// rank's slices: (rows, columns) each, a vector as (n, 1), FSDP's view of them.
std::vector<std::pair<std::int64_t, std::int64_t>> local_parameters(
    const nn::LlamaConfig& c, const std::vector<nn::LayerRange>& stages, int tp) {
  const auto holds_layer = [&](std::int64_t l) {
    return std::any_of(stages.begin(), stages.end(),
                       [&](const nn::LayerRange& s) { return s.first <= l && l < s.last; });
  };
  const bool first = holds_layer(0), last = holds_layer(c.n_layers - 1);
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& [name, shape] : c.parameter_shapes()) {
    bool held = false;
    if (name.rfind("layers.", 0) == 0) {
      held = holds_layer(std::stoll(name.substr(7)));
    } else {
      held = name == "tok_embeddings.weight" ? first : last;
    }
    if (!held) continue;
    std::int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
    const bool row_parallel =
        name.find(".wo.") != std::string::npos || name.find(".w2.") != std::string::npos;
    if (shape.size() == 2) (row_parallel ? cols : rows) /= tp;
    out.emplace_back(rows, cols);
  }
  return out;
}

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
// backward goes on to overwrite, and the gathered inputs under sequence parallelism.
std::int64_t block_deferred(const Widths& w, std::int64_t rows) {
  std::int64_t n = 2 * rows * w.dim * kFloat + rows * w.qkv() * w.operand;
  if (w.operand == 2) n += rows * 2 * w.hidden * w.operand;
  if (w.sequence_sharded) n += 2 * rows * w.dim * w.operand;
  return n;
}

// Buffers a block keeps between steps: backward's gradients of its activations.
std::int64_t block_scratch(const Widths& w, std::int64_t rows) {
  return rows * (w.qkv() + w.heads * w.head_dim + w.hidden) * kFloat +
         w.local_rows(rows) * w.dim * kFloat;
}

std::int64_t head_scratch(const Widths& w, std::int64_t rows) {
  std::int64_t n = rows * kFloat + rows * w.vocab * w.operand + rows * w.dim * kFloat;
  if (w.sequence_sharded) n += w.local_rows(rows) * w.dim * kFloat;
  if (w.gathered_logits) n += rows * w.vocab * w.tp * kFloat;
  return n;
}

// Tensor parallelism's buffers (nn/tensor_parallel.h): a partial sum, its reduction, and
// under sequence parallelism the gathered rows (an operand, and a gradient).
std::int64_t tensor_parallel_scratch(const Widths& w, std::int64_t rows) {
  if (w.tp == 1) return 0;
  std::int64_t n = rows * w.dim * kFloat + w.local_rows(rows) * w.dim * kFloat;
  if (w.sequence_sharded) n += rows * w.dim * (w.operand + kFloat);
  return n;
}

struct Stage {
  nn::LayerRange layers;
  std::int64_t saved = 0, deferred = 0;  // one micro-batch's
};

// The most a pipeline rank keeps at once over its actions in order: an F adds its stage's
// activations, a B frees them, an I adds the deferred copies, which its W frees with the
// activations (PipelineRuntime's accounting).
std::int64_t pipeline_peak(const std::vector<parallel::Action>& actions,
                           const std::vector<Stage>& stages) {
  std::int64_t held = 0, peak = 0;
  for (const parallel::Action& a : actions) {
    const Stage& s = stages[static_cast<std::size_t>(a.stage)];
    switch (a.kind) {
      case parallel::ActionKind::kForward:
        held += s.saved;
        break;
      case parallel::ActionKind::kFullBackward:
        held -= s.saved;
        break;
      case parallel::ActionKind::kBackwardInput:
        held += s.deferred;
        break;
      case parallel::ActionKind::kBackwardWeight:
        held -= s.saved + s.deferred;
        break;
      default:
        break;
    }
    peak = std::max(peak, held);
  }
  return peak;
}

// The state a rank keeps between steps, as the data-parallel wrappers count it (DDP's
// buckets as scratch).
void add_state(const Job& job, const std::vector<std::pair<std::int64_t, std::int64_t>>& params,
               RankMemory& m) {
  const parallel::ParallelDims& d = job.options.dims;
  std::int64_t numel = 0, shard = 0;
  const std::int64_t shards = static_cast<std::int64_t>(d.dp_shard) * d.cp;
  for (const auto& [rows, cols] : params) {
    numel += rows * cols;
    shard += (rows + shards - 1) / shards * cols;
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
}

}  // namespace

std::vector<RankMemory> estimate_memory(const Job& job) {
  const parallel::ParallelDims& d = job.options.dims;
  const Widths w(job.model, job.options);
  const int n_layers = static_cast<int>(job.model.n_layers);
  const std::int64_t seq = job.seq / d.cp;  // this rank's positions of each sequence
  std::vector<Stage> stages;
  parallel::Schedule schedule;
  std::int64_t sequences = job.batch;  // per forward
  if (d.pp > 1) {
    schedule = parallel::make_pipeline_schedule(job.options.pipeline, n_layers, d.pp);
    for (const nn::LayerRange& r : parallel::split_layers(n_layers, schedule.num_stages(),
                                                          job.options.pipeline.layers_per_stage))
      stages.push_back({r});
    sequences = job.batch / schedule.microbatches;
  } else {
    stages.push_back({{0, n_layers}});
  }
  const std::int64_t rows = sequences * seq;
  for (Stage& s : stages) {
    for (int l = s.layers.first; l < s.layers.last; ++l) {
      s.saved += block_activations(w, rows, job.activation_checkpointing);
      s.deferred += block_deferred(w, rows);
    }
    if (s.layers.last == n_layers) {
      s.saved += head_activations(w, rows, d.pp > 1);
      s.deferred += rows * w.vocab * w.operand;
    }
  }
  std::vector<RankMemory> out(static_cast<std::size_t>(d.product()));
  const int per_stage = d.product() / d.pp;
  for (int rank = 0; rank < d.product(); ++rank) {
    RankMemory& m = out[static_cast<std::size_t>(rank)];
    m.rank = rank;
    m.stage = rank / per_stage;
    std::vector<nn::LayerRange> mine;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      if (d.pp == 1 || schedule.stage_to_rank[s] == m.stage) mine.push_back(stages[s].layers);
    }
    add_state(job, local_parameters(job.model, mine, d.tp), m);
    int layers = 0;
    bool head = false;
    for (const nn::LayerRange& r : mine) {
      layers += r.last - r.first;
      head = head || r.last == n_layers;
    }
    m.activations = d.pp > 1
                        ? pipeline_peak(schedule.actions[static_cast<std::size_t>(m.stage)], stages)
                        : stages[0].saved + w.local_rows(rows) * w.dim * kFloat;
    m.scratch += layers * block_scratch(w, rows) + (head ? head_scratch(w, rows) : 0) +
                 tensor_parallel_scratch(w, rows);
    // Backward recomputes a block's forward into a copy of its input, and frees it after.
    if (job.activation_checkpointing && layers > 0) {
      m.working = block_activations(w, rows, false) - block_activations(w, rows, true) +
                  w.local_rows(rows) * w.dim * kFloat;
    }
    m.program = job.program;
  }
  return out;
}

}  // namespace weft::estimate
