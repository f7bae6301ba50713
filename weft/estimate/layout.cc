#include "weft/estimate/layout.h"

#include <algorithm>
#include <string>

#include "weft/parallel/pipeline.h"

namespace weft::estimate {

Widths::Widths(const nn::LlamaConfig& c, const parallel::ParallelOptions& o)
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

std::vector<ModelParameter> model_parameters(const nn::LlamaConfig& c) {
  std::vector<ModelParameter> out;
  for (const auto& [name, shape] : c.parameter_shapes()) {
    int layer = static_cast<int>(c.n_layers);
    if (name.rfind("layers.", 0) == 0) layer = static_cast<int>(std::stoll(name.substr(7)));
    if (name == "tok_embeddings.weight") layer = -1;
    const bool row_parallel =
        name.find(".wo.") != std::string::npos || name.find(".w2.") != std::string::npos;
    out.push_back(
        {shape[0], shape.size() > 1 ? shape[1] : 1, layer, shape.size() == 2, row_parallel});
  }
  return out;
}

std::vector<LocalParameter> local_parameters(const std::vector<ModelParameter>& model, int n_layers,
                                             const std::vector<nn::LayerRange>& stages, int tp) {
  const auto holds_layer = [&](int l) {
    return std::any_of(stages.begin(), stages.end(),
                       [&](const nn::LayerRange& s) { return s.first <= l && l < s.last; });
  };
  const bool first = holds_layer(0), last = holds_layer(n_layers - 1);
  std::vector<LocalParameter> out;
  for (const ModelParameter& p : model) {
    const bool held = p.layer < 0 ? first : p.layer == n_layers ? last : holds_layer(p.layer);
    if (!held) continue;
    std::int64_t rows = p.rows, cols = p.cols;
    if (p.matrix) (p.row_parallel ? cols : rows) /= tp;
    out.push_back({rows, cols, p.layer < 0 || p.layer == n_layers ? 0 : p.layer + 1});
  }
  return out;
}

std::vector<nn::LayerRange> StageCut::held_by(int rank) const {
  if (schedule.stage_to_rank.empty()) return stages;
  std::vector<nn::LayerRange> mine;
  for (std::size_t s = 0; s < stages.size(); ++s)
    if (schedule.stage_to_rank[s] == rank) mine.push_back(stages[s]);
  return mine;
}

StageCut cut_stages(const Job& job) {
  job.model.validate();
  const parallel::ParallelDims& d = job.options.dims;
  if (d.tp > 1) job.model.validate_tensor_parallel(d.tp);
  const int n_layers = static_cast<int>(job.model.n_layers);
  StageCut out;
  out.sequences = job.batch;
  if (d.pp > 1) {
    out.schedule = parallel::make_pipeline_schedule(job.options.pipeline, n_layers, d.pp);
    out.stages = parallel::split_layers(n_layers, out.schedule.num_stages(),
                                        job.options.pipeline.layers_per_stage);
    out.sequences = job.batch / out.schedule.microbatches;
  } else {
    out.stages.push_back({0, n_layers});
  }
  out.rows = out.sequences * (job.seq / d.cp);
  out.parameters = model_parameters(job.model);
  return out;
}

}  // namespace weft::estimate
