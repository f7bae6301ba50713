#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "weft/base/error.h"
#include "weft/kernels/elementwise.h"
#include "weft/kernels/matmul.h"
#include "weft/parallel/leaf_reduce.h"
#include "weft/parallel/steps.h"
#include "weft/parallel/timed.h"

namespace weft::parallel {
namespace {

void check_layout_invariant(const ParallelOptions& options) {
  const ParallelDims& d = options.dims;
  if (d.cp > 1 || (d.pp > 1 && d.dp_shard > 1)) {
    throw InvalidArgument(
        "deterministic = \"layout\" trains one process, DDP, FSDP, HSDP, tensor parallelism "
        "and pipelines (with DDP) so far; context parallelism and FSDP with pipeline stages "
        "are not layout-invariant yet: leave deterministic unset for them");
  }
  if (d.tp > 1 && options.feature_blocks % d.tp != 0) {
    throw InvalidArgument(
        "deterministic = \"layout\" with tensor_parallel_degree " + std::to_string(d.tp) +
        " needs training.deterministic_blocks a "
        "multiple of it (it is " +
        std::to_string(options.feature_blocks) + "), the same in every run to compare");
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

  // Each dimension-0 row's sum of squares from the one rank that holds it (the first replica,
  // the first tensor-parallel rank for a parameter every one holds whole), zeros elsewhere (a
  // sum of one term and zeros is exact in any order), then added in the model's row order.
  double clip_grad_norm(double max_norm) override {
    Strategies& s = strategies();
    std::map<std::string, std::size_t> first_row;
    std::size_t rows = 0;
    for (const auto& [name, shape] : s.model.whole_parameters()) {
      first_row[name] = rows;
      rows += shape.empty() ? 1 : static_cast<std::size_t>(shape[0]);
    }
    std::vector<double> sums(rows, 0.0);
    if (s.replica == 0) row_sums_of_squares(sums, first_row);
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
                                    s.model.parameters().leaf_trees(),
                                    s.tp == nullptr || s.tp->rank() == 0);
    });
    return sum / static_cast<double>(global_tokens_);
  }

 private:
  // sums[first_row[name] + row] for the rows this rank holds. A row of a weight whose columns
  // are cut into feature blocks (sharding dim 1) is summed block by block, the tensor-parallel
  // group's blocks all-gathered and added in block order, as one process adds them all.
  void row_sums_of_squares(std::vector<double>& sums,
                           const std::map<std::string, std::size_t>& first_row) {
    Strategies& s = strategies();
    const int blocks = s.options.feature_blocks, tp_rank = s.tp != nullptr ? s.tp->rank() : 0;
    const auto by_blocks = [&](const nn::Parameter& p) {
      return p.sharding.dim == 1 && blocks > 1;
    };
    const std::vector<DataParallel::GradientRows> held = s.dp->gradient_rows();
    std::vector<double> mine;  // the split rows' block sums: [run][row][this rank's block]
    for (const DataParallel::GradientRows& g : held) {
      const nn::Parameter& p = *g.param;
      const std::size_t first =
          first_row.at(p.name) + static_cast<std::size_t>(g.first_row) +
          (p.sharding.dim == 0 ? static_cast<std::size_t>(p.shard_offset()) : 0);
      if (by_blocks(p)) {
        const std::int64_t local = blocks / p.sharding.parts, width = g.cols / local;
        for (std::int64_t r = 0; r < g.rows; ++r) {
          for (std::int64_t j = 0; j < local; ++j)
            mine.push_back(kernels::sum_squares(g.data + r * g.cols + j * width, width));
        }
      } else if (p.sharded() || tp_rank == 0) {
        for (std::int64_t r = 0; r < g.rows; ++r)
          sums[first + static_cast<std::size_t>(r)] =
              kernels::sum_squares(g.data + r * g.cols, g.cols);
      }
    }
    if (mine.empty()) return;
    const std::size_t ranks = s.tp != nullptr ? static_cast<std::size_t>(s.tp->size()) : 1;
    std::vector<double> all(mine.size() * ranks);
    if (s.tp != nullptr) {
      add_seconds(s.seconds, [&] { s.tp->all_gather(all, mine); });
    } else {
      all = mine;
    }
    if (tp_rank != 0) return;
    std::size_t at = 0;  // into each rank's list
    for (const DataParallel::GradientRows& g : held) {
      const nn::Parameter& p = *g.param;
      if (!by_blocks(p)) continue;
      const auto local = static_cast<std::size_t>(blocks / p.sharding.parts);
      for (std::int64_t r = 0; r < g.rows; ++r, at += local) {
        double sum = 0;
        for (std::size_t q = 0; q < ranks; ++q) {
          for (std::size_t j = 0; j < local; ++j) sum += all[q * mine.size() + at + j];
        }
        sums[first_row.at(p.name) + static_cast<std::size_t>(g.first_row + r)] = sum;
      }
    }
  }

  std::int64_t micro_batches_ = 0;  // since zero_grad
  std::int64_t global_tokens_ = 1;  // in a step's global batch
};

}  // namespace

std::unique_ptr<ParallelModel> make_layout_invariant_steps(nn::Llama& model, DeviceMesh* mesh,
                                                           const ParallelOptions& options) {
  check_layout_invariant(options);
  auto strategies =
      std::make_unique<Strategies>(model, mesh, options, GradientSums::kCanonicalTree);
  model.set_feature_blocks(options.feature_blocks);
  return std::make_unique<LayoutInvariantSteps>(std::move(strategies));
}

}  // namespace weft::parallel
