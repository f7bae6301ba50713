#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weft/base/error.h"
#include "weft/kernels/elementwise.h"
#include "weft/kernels/matmul.h"
#include "weft/parallel/leaf_reduce.h"
#include "weft/parallel/steps.h"
#include "weft/parallel/timed.h"

namespace weft::parallel {
namespace {

// Every width a rank splits into feature blocks divides by their count, a power of two:
// checked before any collective, so that no rank fails alone in the middle of a step.
void check_feature_blocks(const nn::LlamaConfig& m, int blocks) {
  if (blocks < 1 || (blocks & (blocks - 1)) != 0) {
    throw InvalidArgument("training.deterministic_blocks = " + std::to_string(blocks) +
                          " is not a power of two");
  }
  const std::int64_t kv_width = m.n_kv_heads * (m.dim / m.n_heads);
  for (const auto& [what, width] : {std::pair<const char*, std::int64_t>{"dim", m.dim},
                                    {"n_kv_heads x head_dim", kv_width},
                                    {"the feed-forward width", m.hidden_dim()},
                                    {"vocab_size", m.vocab_size}}) {
    if (width % blocks != 0) {
      throw InvalidArgument("training.deterministic_blocks = " + std::to_string(blocks) +
                            " does not divide the model's " + what + " (" + std::to_string(width) +
                            "): choose a power of two that does");
    }
  }
}

// The sequence length each step checks (LeafTrees::start), the same on every rank.
void check_sequence_blocks(const ParallelOptions& options) {
  const int blocks = options.sequence_blocks, cp = options.dims.cp;
  if (blocks < 1 || (blocks & (blocks - 1)) != 0) {
    throw InvalidArgument("training.deterministic_sequence_blocks = " + std::to_string(blocks) +
                          " is not a power of two");
  }
  if (cp > 1 && blocks % (2 * cp) != 0) {
    throw InvalidArgument(
        "deterministic = \"layout\" with context_parallel_degree " + std::to_string(cp) +
        " cuts each sequence into " + std::to_string(2 * cp) +
        " chunks of whole blocks: set training.deterministic_sequence_blocks to a multiple of " +
        std::to_string(2 * cp) + " (it is " + std::to_string(blocks) +
        "), the same in every run to compare");
  }
}

void check_layout_invariant(const nn::LlamaConfig& model, const ParallelOptions& options) {
  check_feature_blocks(model, options.feature_blocks);
  check_sequence_blocks(options);
  const ParallelDims& d = options.dims;
  if (d.tp > 1 && options.feature_blocks % d.tp != 0) {
    throw InvalidArgument(
        "deterministic = \"layout\" with tensor_parallel_degree " + std::to_string(d.tp) +
        " needs training.deterministic_blocks a "
        "multiple of it (it is " +
        std::to_string(options.feature_blocks) + "), the same in every run to compare");
  }
  if (options.reduce_dtype != DType::kFloat32 && options.reduce_dtype != DType::kBFloat16) {
    throw InvalidArgument("deterministic = \"layout\" sums gradients in float32 or bfloat16, not " +
                          std::string(dtype_name(options.reduce_dtype)));
  }
}

// Each sequence of the global batch (or each block of its positions) is a leaf of the canonical
// tree: sequence i of data rank r's micro-batch m is sequence (m x ranks + r) x batch + i (the
// data loader's order).
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
    const std::int64_t leaf = seq / strategies().options.sequence_blocks;
    if (leaf % kernels::product_rows() != 0) {
      throw InvalidArgument(
          "layout-invariant training needs products of whole leaves: call "
          "kernels::set_product_rows with a divisor of " +
          std::to_string(leaf) + " rows (it is " + std::to_string(kernels::product_rows()) + ")");
    }
    check_whole_leaves_per_rank(batch);
    nn::LeafTrees& trees = strategies().model.parameters().leaf_trees();
    const std::int64_t micro = micro_batches_++;
    const int cp = strategies().cp != nullptr ? strategies().cp->size() : 1;
    global_tokens_ = std::llround(static_cast<double>(batch * seq) / loss_scale);
    check_global_batch(micro, batch, seq);
    trees.start((micro * data_size() + data_rank()) * batch, seq / cp, global_tokens_ / seq);
    try {
      const double loss = Steps::forward_backward(tokens, targets, batch, seq, loss_scale);
      trees.stop();
      return loss;
    } catch (...) {
      trees.stop();
      throw;
    }
  }

  // Each dimension-0 row's sum of squares from the one rank that holds it (the first copy,
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
    if (first_copy()) row_sums_of_squares(sums, first_row);
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
  // The leaves are numbered over the global batch that loss_scale implies: this rank's
  // micro-batch must fit in it (a rank may train one more micro-batch than another, when the
  // ranks do not divide the global batch's micro-batches), checked before any collective.
  void check_global_batch(std::int64_t micro, std::int64_t batch, std::int64_t seq) const {
    const std::int64_t sequences = global_tokens_ / seq,
                       used = (micro * data_size() + data_rank() + 1) * batch;
    if (global_tokens_ % seq != 0 || used > sequences) {
      throw InvalidArgument(
          "layout-invariant training: loss_scale makes the global batch " +
          std::to_string(sequences) + " sequences, but micro-batch " + std::to_string(micro + 1) +
          " of data rank " + std::to_string(data_rank()) + " (of " + std::to_string(data_size()) +
          ", " + std::to_string(batch) + " sequences a micro-batch) reaches " +
          std::to_string(used) +
          ": pass loss_scale = 1 / (data ranks x micro-batches), and zero_grad() each step");
    }
  }

  // Sequence parallelism here gathers each leaf's norm gradients from the rank holding it
  // (RMSNorm::backward_sequence_sharded): a rank's rows must be whole leaves. Every rank
  // checks the same numbers before any collective.
  void check_whole_leaves_per_rank(std::int64_t batch) {
    const Strategies& s = strategies();
    if (s.tp == nullptr || !s.options.sequence_parallel) return;
    const int micro = s.pipeline ? s.pipeline->schedule().microbatches : 1;
    const int cp = s.cp != nullptr ? s.cp->size() : 1;
    // Leaves a context-parallel rank holds per micro-batch.
    const std::int64_t leaves = batch / micro * s.options.sequence_blocks / cp;
    if (leaves % s.tp->size() != 0) {
      throw InvalidArgument(
          "layout-invariant training with sequence parallelism needs whole leaves on each "
          "tensor-parallel rank: " +
          std::to_string(leaves) +
          " leaves (sequences, or blocks of them) per micro-batch do "
          "not split over " +
          std::to_string(s.tp->size()) +
          " ranks; choose a batch_size (per pipeline micro-batch) or "
          "training.deterministic_sequence_blocks that the tensor_parallel_degree divides, or "
          "set parallelism.enable_sequence_parallel = false");
    }
  }

  // Rows of a gradient whose columns are cut into feature blocks: sums[first + row].
  struct SplitRows {
    std::size_t first;
    std::int64_t rows, blocks;  // this rank's blocks a row
  };

  // Every tensor-parallel rank's block sums of the same rows all-gathered, each row's added
  // in block order (rank-major) on the first rank.
  void add_block_sums(std::vector<double>& sums, const std::vector<SplitRows>& split,
                      std::vector<double>& mine) {
    Strategies& s = strategies();
    const std::size_t ranks = s.tp != nullptr ? static_cast<std::size_t>(s.tp->size()) : 1;
    std::vector<double> all = mine;
    if (s.tp != nullptr) {
      all.resize(mine.size() * ranks);
      add_seconds(s.seconds, [&] { s.tp->all_gather(all, mine); });
      if (s.tp->rank() != 0) return;
    }
    std::size_t at = 0;  // into each rank's list
    for (const SplitRows& run : split) {
      const auto local = static_cast<std::size_t>(run.blocks);
      for (std::int64_t r = 0; r < run.rows; ++r, at += local) {
        double sum = 0;
        for (std::size_t q = 0; q < ranks; ++q) {
          for (std::size_t j = 0; j < local; ++j) sum += all[q * mine.size() + at + j];
        }
        sums[run.first + static_cast<std::size_t>(r)] = sum;
      }
    }
  }

  // sums[first_row[name] + row] for the rows this rank holds. A row of a weight whose columns
  // are cut into feature blocks (sharding dim 1) is summed block by block, the tensor-parallel
  // group's blocks all-gathered and added in block order, as one process adds them all.
  void row_sums_of_squares(std::vector<double>& sums,
                           const std::map<std::string, std::size_t>& first_row) {
    Strategies& s = strategies();
    const int blocks = s.options.feature_blocks, tp_rank = s.tp != nullptr ? s.tp->rank() : 0;
    std::vector<SplitRows> split;
    std::vector<double> block_sums;  // [split run][row][this rank's block]
    for (const DataParallel::GradientRows& g : s.dp->gradient_rows()) {
      const nn::Parameter& p = *g.param;
      const std::size_t first =
          first_row.at(p.name) + static_cast<std::size_t>(g.first_row) +
          (p.sharding.dim == 0 ? static_cast<std::size_t>(p.shard_offset()) : 0);
      if (p.sharding.dim == 1 && blocks > 1) {
        const std::int64_t local = blocks / p.sharding.parts, width = g.cols / local;
        split.push_back({first, g.rows, local});
        for (std::int64_t r = 0; r < g.rows; ++r) {
          for (std::int64_t j = 0; j < local; ++j)
            block_sums.push_back(kernels::sum_squares(g.data + r * g.cols + j * width, width));
        }
      } else if (p.sharded() || tp_rank == 0) {
        for (std::int64_t r = 0; r < g.rows; ++r)
          sums[first + static_cast<std::size_t>(r)] =
              kernels::sum_squares(g.data + r * g.cols, g.cols);
      }
    }
    if (split.empty()) return;
    add_block_sums(sums, split, block_sums);
  }

  std::int64_t micro_batches_ = 0;  // since zero_grad
  std::int64_t global_tokens_ = 1;  // in a step's global batch
};

}  // namespace

std::unique_ptr<ParallelModel> make_layout_invariant_steps(nn::Llama& model, DeviceMesh* mesh,
                                                           const ParallelOptions& options) {
  check_layout_invariant(model.config(), options);
  auto strategies =
      std::make_unique<Strategies>(model, mesh, options, GradientSums::kCanonicalTree);
  model.set_feature_blocks(options.feature_blocks);
  model.set_sequence_blocks(options.sequence_blocks);
  model.parameters().leaf_trees().set_bf16_gradients(options.reduce_dtype == DType::kBFloat16);
  return std::make_unique<LayoutInvariantSteps>(std::move(strategies));
}

}  // namespace weft::parallel
