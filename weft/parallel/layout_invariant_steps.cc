#include <cmath>
#include <string>
#include <vector>

#include "weft/base/error.h"
#include "weft/kernels/matmul.h"
#include "weft/parallel/leaf_reduce.h"
#include "weft/parallel/steps.h"
#include "weft/parallel/timed.h"

namespace weft::parallel {
namespace {

void check_layout_invariant(const ParallelOptions& options) {
  const ParallelDims& d = options.dims;
  if (d.tp > 1 || d.cp > 1 || (d.pp > 1 && d.dp_shard > 1)) {
    throw InvalidArgument(
        "deterministic = \"layout\" trains one process, DDP, FSDP, HSDP and pipelines (with "
        "DDP) so far; tensor and context parallelism and FSDP with pipeline stages are not "
        "layout-invariant yet: leave deterministic unset for them");
  }
  if (options.reduce_dtype != DType::kFloat32) {
    throw InvalidArgument(
        "deterministic = \"layout\" sums gradients in float32: set "
        "mixed_precision_reduce = \"float32\"");
  }
}

// Each sequence of the global batch is a leaf of the canonical tree: sequence i of data rank
// r's micro-batch m is sequence (m x ranks + r) x batch + i (the data loader's order).
class LayoutInvariantSteps : public Steps {
 public:
  using Steps::Steps;

  void zero_grad() override {
    Steps::zero_grad();
    strategies().model.parameters().leaf_trees().clear();
    micro_batches_ = 0;
  }

  double forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                          std::int64_t batch, std::int64_t seq, double loss_scale) override {
    if (seq % kernels::product_rows() != 0) {
      throw InvalidArgument(
          "layout-invariant training needs products of whole sequences: call "
          "kernels::set_product_rows with a divisor of " +
          std::to_string(seq) + " rows (it is " + std::to_string(kernels::product_rows()) + ")");
    }
    nn::LeafTrees& trees = strategies().model.parameters().leaf_trees();
    const std::int64_t micro = micro_batches_++;
    trees.start((micro * data_size() + data_rank()) * batch, seq);
    global_tokens_ = std::llround(static_cast<double>(batch * seq) / loss_scale);
    try {
      const double loss = run(tokens, targets, batch, seq, loss_scale);
      trees.stop();
      return loss;
    } catch (...) {
      trees.stop();
      throw;
    }
  }

  // Each dimension-0 row's sum of squares from the first replica that holds it, zeros
  // elsewhere (a sum of one term and zeros is exact in any order), then added in the model's
  // row order.
  double clip_grad_norm(double max_norm) override {
    Strategies& s = strategies();
    FirstRow first_row;
    std::size_t rows = 0;
    for (const auto& [name, shape] : s.model.whole_parameters()) {
      first_row[name] = rows;
      rows += shape.empty() ? 1 : static_cast<std::size_t>(shape[0]);
    }
    std::vector<double> sums(rows, 0.0);
    if (s.replica == 0) s.dp->row_sums_of_squares(sums, first_row);
    if (s.mesh != nullptr) add_seconds(s.seconds, [&] { s.mesh->world().all_reduce(sums); });
    double sum = 0;
    for (const double term : sums) sum += term;
    return clip_to(std::sqrt(sum), max_norm);
  }

  // Over the world, where only the last pipeline stages hold loss blocks, each its data
  // rank's leaves.
  double step_loss(double /*shares*/) override {
    Strategies& s = strategies();
    double sum = 0;
    add_seconds(s.seconds, [&] {
      sum = LeafReducer::sum_losses(s.mesh != nullptr ? &s.mesh->world() : nullptr,
                                    s.model.parameters().leaf_trees());
    });
    return sum / static_cast<double>(global_tokens_);
  }

 private:
  std::int64_t micro_batches_ = 0;  // since zero_grad
  std::int64_t global_tokens_ = 1;  // in a step's global batch
};

}  // namespace

std::unique_ptr<ParallelModel> make_layout_invariant_steps(nn::Llama& model, DeviceMesh* mesh,
                                                           const ParallelOptions& options) {
  check_layout_invariant(options);
  return std::make_unique<LayoutInvariantSteps>(
      std::make_unique<Strategies>(model, mesh, options, GradientSums::kCanonicalTree));
}

}  // namespace weft::parallel
