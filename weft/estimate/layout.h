// What the estimates share (internal to weft/estimate): a rank's slice of the model's widths,
// the parameters it holds, and the pipeline's stages.
#pragma once

#include <cstdint>
#include <vector>

#include "weft/estimate/memory_estimate.h"
#include "weft/nn/llama.h"
#include "weft/parallel/parallelize.h"
#include "weft/parallel/pipeline_schedule.h"

namespace weft::estimate {

inline constexpr std::int64_t kFloat = 4;

// The sizes one rank's layers work with, tensor parallelism's slices taken.
struct Widths {
  std::int64_t dim, head_dim, heads, kv_heads, hidden, vocab;  // this rank's
  std::int64_t tp;
  bool sequence_sharded;  // sequence parallelism: the residual stream's rows split over tp
  bool gathered_logits;   // tensor parallelism without loss parallelism
  std::int64_t operand;   // bytes of what products read: 2 in bfloat16, 4 in float32

  Widths(const nn::LlamaConfig& c, const parallel::ParallelOptions& o);
  std::int64_t qkv() const { return (heads + 2 * kv_heads) * head_dim; }
  std::int64_t local_rows(std::int64_t rows) const { return sequence_sharded ? rows / tp : rows; }
};

// A parameter as FSDP sees it: (rows, columns), a vector as (n, 1), and its unit (0 the
// root: the embedding, the final norm and the output layer; 1 + l block l).
struct LocalParameter {
  std::int64_t rows, cols;
  int unit;
};

// A parameter of the whole model: its shape ((n, 1) for a vector), the layer it belongs to
// (-1 the embedding, which goes with layer 0; n_layers the final norm and the output layer,
// which go with the last), and whether tensor parallelism splits its columns (wo, w2) or its
// rows.
struct ModelParameter {
  std::int64_t rows, cols;
  int layer;
  bool matrix, row_parallel;
};
std::vector<ModelParameter> model_parameters(const nn::LlamaConfig& c);

// The parameters this pipeline rank holds (its stages' layers, the embedding with layer 0,
// the final norm and the output layer with the last), as this tensor-parallel rank's slices.
std::vector<LocalParameter> local_parameters(const std::vector<ModelParameter>& model, int n_layers,
                                             const std::vector<nn::LayerRange>& stages, int tp);

// The pipeline's stages (one, every layer, without pipeline parallelism).
struct StageCut {
  std::vector<nn::LayerRange> stages;
  parallel::Schedule schedule;             // with pipeline parallelism
  std::int64_t sequences = 0;              // of one forward (a micro-batch's under pipelines)
  std::int64_t rows = 0;                   // of one forward: its sequences x this rank's positions
  std::vector<ModelParameter> parameters;  // the whole model's

  // The stages pipeline rank `rank` holds (every stage without pipeline parallelism).
  std::vector<nn::LayerRange> held_by(int rank) const;
};

// Validates the model and the tensor-parallel degree (InvalidArgument), and cuts the stages.
StageCut cut_stages(const Job& job);

}  // namespace weft::estimate
