#include "weft/parallel/parallelize.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include "weft/base/error.h"
#include "weft/kernels/elementwise.h"
#include "weft/kernels/matmul.h"
#include "weft/parallel/checks.h"
#include "weft/parallel/context_parallel.h"
#include "weft/parallel/ddp.h"
#include "weft/parallel/leaf_reduce.h"
#include "weft/parallel/pipeline.h"
#include "weft/parallel/pipeline_picture.h"
#include "weft/parallel/tensor_parallel.h"
#include "weft/parallel/timed.h"

namespace weft::parallel {
namespace {

using Counted = std::function<bool(const nn::Parameter&)>;
using FirstRow = std::map<std::string, std::size_t>;  // parameter name -> its first row

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::int64_t bytes_of_floats(std::int64_t n) {
  return n * static_cast<std::int64_t>(sizeof(float));
}

// The data-parallel wrapper inside a ParallelModel: what differs between one process (or
// tensor parallelism alone), DDP and FSDP.
class DataParallel {
 public:
  virtual ~DataParallel() = default;
  virtual void init_weights(std::uint64_t seed) = 0;
  virtual void zero_grad() = 0;
  virtual void prepare_sync() = 0;
  virtual void finish_sync() = 0;
  // Over the gradients this rank holds, after finish_sync.
  virtual double grad_sum_squares(const Counted& counted) const = 0;
  virtual void scale_grads(float factor) = 0;
  // The layout-invariant norm's terms: the sum of squares of each row (dimension 0) of each
  // gradient this rank holds, at rows[first_row(parameter) + row], the whole model's rows in
  // its parameters' order.
  virtual void row_sums_of_squares(std::vector<double>& rows, const FirstRow& first_row) const = 0;
  // Pipeline stages: no reduction starts while held (DistributedDataParallel::hold_reductions);
  // reduce_held launches those held back (zero bubble, after the last W).
  virtual void hold_reductions(bool held) = 0;
  virtual void reduce_held() = 0;
  virtual void step(double lr) = 0;
  // The state whole over the data-parallel dimensions (this rank's tensor-parallel slices):
  // filled where the data coordinates are 0. Collective over the ranks whose replica
  // coordinate is 0.
  virtual std::pair<nn::StateDict, nn::AdamWState> state() = 0;
  // The training state this rank holds, one entry per parameter and kind (value, exp_avg,
  // exp_avg_sq): rows [first_row, first_row + rows) of the parameter (this rank's
  // tensor-parallel slice of it), contiguous at `data`.
  struct Held {
    const nn::Parameter* param;
    const char* kind;  // "model.", "optim.exp_avg.", "optim.exp_avg_sq."
    std::int64_t first_row, rows;
    float* data;
  };
  virtual std::vector<Held> held() = 0;
  virtual void held_loaded(std::int64_t optimizer_steps) = 0;
  virtual std::int64_t optimizer_steps() const = 0;
  virtual void check_replicas_identical() = 0;
  virtual void memory(MemoryReport& report) const = 0;
  virtual void describe(std::vector<std::string>& lines, bool with_peaks) const = 0;
};

// Every data-parallel rank holds the whole (tensor-parallel slice of the) model: one process,
// or DDP over `group`.
class Replicated : public DataParallel {
 public:
  Replicated(nn::Llama& model, dist::ProcessGroup* group, const ParallelOptions& options)
      : model_(model),
        adamw_(model.parameters(), options.optimizer),
        group_(group),
        layout_invariant_(options.layout_invariant) {
    if (group != nullptr && group->size() > 1 && !layout_invariant_) {
      ddp_ = std::make_unique<DistributedDataParallel>(model, *group, options.bucket_bytes,
                                                       options.reduce_dtype);
    }
  }
  void init_weights(std::uint64_t seed) override { model_.init_weights(seed); }
  void zero_grad() override { model_.parameters().zero_grad(); }
  void prepare_sync() override {
    if (ddp_) ddp_->prepare_sync();
  }
  void finish_sync() override {
    if (layout_invariant_) leaf_reducer_.reduce(group_, model_.parameters().leaf_trees());
    if (ddp_) ddp_->finish_sync();
  }
  // In parameter order, as nn::grad_norm sums.
  double grad_sum_squares(const Counted& counted) const override {
    double sum = 0;
    for (const auto& p : model_.parameters().all()) {
      if (counted(*p)) sum += kernels::sum_squares(p->grad.data<float>(), p->grad.numel());
    }
    return sum;
  }
  void scale_grads(float factor) override {
    for (const auto& p : model_.parameters().all())
      kernels::scale(p->grad.data<float>(), factor, p->grad.numel());
  }
  void row_sums_of_squares(std::vector<double>& rows, const FirstRow& first_row) const override {
    for (const auto& p : model_.parameters().all()) {
      const std::size_t first = first_row.at(p->name);
      const std::int64_t n = p->grad.ndim() == 0 ? 1 : p->grad.size(0);
      const std::int64_t cols = n == 0 ? 0 : p->grad.numel() / n;
      for (std::int64_t r = 0; r < n; ++r) {
        rows[first + static_cast<std::size_t>(r)] =
            kernels::sum_squares(p->grad.data<float>() + r * cols, cols);
      }
    }
  }
  void hold_reductions(bool held) override {
    if (ddp_) ddp_->hold_reductions(held);
  }
  void reduce_held() override {
    if (ddp_) ddp_->reduce_held();
  }
  void step(double lr) override { adamw_.step(lr); }
  std::pair<nn::StateDict, nn::AdamWState> state() override {
    return {model_.parameters().state_dict(), adamw_.state()};
  }
  std::vector<Held> held() override {
    const nn::AdamWState moments = adamw_.state();
    std::vector<Held> all;
    const auto& params = model_.parameters().all();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const nn::Parameter& p = *params[i];
      const std::int64_t rows = p.value.ndim() == 0 ? 1 : p.value.size(0);
      all.push_back({&p, "model.", 0, rows, p.value.data<float>()});
      all.push_back({&p, "optim.exp_avg.", 0, rows, moments.exp_avg[i].second.data<float>()});
      all.push_back({&p, "optim.exp_avg_sq.", 0, rows, moments.exp_avg_sq[i].second.data<float>()});
    }
    return all;
  }
  void held_loaded(std::int64_t optimizer_steps) override { adamw_.set_steps(optimizer_steps); }
  std::int64_t optimizer_steps() const override { return adamw_.steps(); }
  void check_replicas_identical() override {
    if (group_ != nullptr && group_->size() > 1)
      check_parameters_identical(model_.parameters(), *group_);
  }
  void memory(MemoryReport& report) const override {
    const std::int64_t bytes = bytes_of_floats(model_.parameters().numel());
    report.parameters = report.gradients = bytes;
    report.optimizer = 2 * bytes;
  }
  void describe(std::vector<std::string>& lines, bool with_peaks) const override {
    if (with_peaks) return;  // once, at the start
    if (ddp_) lines.push_back("ddp: " + std::to_string(ddp_->buckets()) + " gradient buckets");
    if (layout_invariant_ && group_ != nullptr && group_->size() > 1)
      lines.push_back(
          "ddp: layout-invariant, gradients summed in the canonical tree after "
          "backward (all-to-all and all-gather)");
  }

 private:
  nn::Llama& model_;
  nn::AdamW adamw_;
  dist::ProcessGroup* group_;
  bool layout_invariant_;
  LeafReducer leaf_reducer_;
  std::unique_ptr<DistributedDataParallel> ddp_;
};

// FSDP over `shard`, HSDP with `replicate`.
class Sharded : public DataParallel {
 public:
  Sharded(nn::Llama& model, dist::ProcessGroup& shard, dist::ProcessGroup* replicate,
          const ParallelOptions& options)
      : fsdp_(model, shard, replicate, options.fsdp_mode, options.optimizer) {
    fsdp_.set_pipelined(options.dims.pp > 1);
    fsdp_.set_reduce_dtype(options.reduce_dtype);
    fsdp_.set_param_dtype(options.param_dtype);
    fsdp_.set_layout_invariant(options.layout_invariant);
  }
  void init_weights(std::uint64_t seed) override { fsdp_.init_weights(seed); }
  void zero_grad() override { fsdp_.zero_grad(); }
  void prepare_sync() override { fsdp_.prepare_sync(); }
  void finish_sync() override { fsdp_.finish_sync(); }
  double grad_sum_squares(const Counted& counted) const override {
    return fsdp_.local_grad_sum_squares(counted);
  }
  void scale_grads(float factor) override { fsdp_.scale_grads(factor); }
  void row_sums_of_squares(std::vector<double>& rows, const FirstRow& first_row) const override {
    fsdp_.row_sums_of_squares(rows, first_row);
  }
  void hold_reductions(bool held) override { fsdp_.hold_reductions(held); }
  void reduce_held() override { fsdp_.reduce_held(); }
  void step(double lr) override { fsdp_.step(lr); }
  std::pair<nn::StateDict, nn::AdamWState> state() override { return fsdp_.full_state(); }
  std::vector<Held> held() override {
    std::vector<Held> all;
    for (const auto& r : fsdp_.shard_rows()) {
      all.push_back({r.param, "model.", r.first_row, r.rows, r.value});
      all.push_back({r.param, "optim.exp_avg.", r.first_row, r.rows, r.exp_avg});
      all.push_back({r.param, "optim.exp_avg_sq.", r.first_row, r.rows, r.exp_avg_sq});
    }
    return all;
  }
  void held_loaded(std::int64_t optimizer_steps) override { fsdp_.shards_loaded(optimizer_steps); }
  std::int64_t optimizer_steps() const override { return fsdp_.steps(); }
  void check_replicas_identical() override {}  // the shards are the state: nothing to drift
  void memory(MemoryReport& report) const override {
    const ShardedMemory m = fsdp_.memory();
    report.parameters = m.parameters;
    report.gradients = m.gradients;
    report.optimizer = m.optimizer;
  }
  void describe(std::vector<std::string>& lines, bool with_peaks) const override {
    const ShardedMemory m = fsdp_.memory();
    char line[256];
    std::snprintf(line, sizeof(line),
                  "fsdp %s: %.1f MiB per rank held between steps (parameters %.1f, gradients "
                  "%.1f, optimizer %.1f; one process: %.1f)",
                  sharding_mode_name(fsdp_.mode()), mib(m.parameters + m.gradients + m.optimizer),
                  mib(m.parameters), mib(m.gradients), mib(m.optimizer), mib(m.one_process));
    lines.emplace_back(line);
    if (!with_peaks) return;
    std::snprintf(line, sizeof(line),
                  "fsdp: during steps at most %.1f MiB more per rank in full copies and "
                  "reduction buffers (%.1f MiB of buffers kept for reuse)",
                  mib(m.unsharded_peak), mib(m.spare_buffers));
    lines.emplace_back(line);
  }

 private:
  FullyShardedDataParallel fsdp_;
};

int coordinate(const DeviceMesh* mesh, const std::string& dim) {
  return mesh != nullptr && mesh->has(dim) ? mesh->coordinate(dim) : 0;
}

dist::ProcessGroup* group(const DeviceMesh* mesh, const std::string& dim) {
  return mesh != nullptr && mesh->has(dim) ? &mesh->group(dim) : nullptr;
}

// Stages per rank: one for GPipe and 1F1B, two for the interleaved and V schedules, unless
// layers_per_stage says how many stages the layers make.
int stages_per_rank(ScheduleKind kind, int n_layers, int pp, int layers_per_stage) {
  const bool single = kind == ScheduleKind::kGPipe || kind == ScheduleKind::k1F1B;
  if (layers_per_stage <= 0) return single ? 1 : 2;
  const int stages = n_layers / layers_per_stage;
  if (stages * layers_per_stage != n_layers || stages % pp != 0 || (single && stages != pp)) {
    throw InvalidArgument("pipeline_parallel_layers_per_stage " + std::to_string(layers_per_stage) +
                          " does not cut n_layers " + std::to_string(n_layers) +
                          " into the stages " + std::string(schedule_name(kind)) + " runs on " +
                          std::to_string(pp) +
                          " ranks: " + (single ? "exactly " : "a multiple of ") +
                          std::to_string(pp) + " stages of equal size");
  }
  return stages / pp;
}

std::unique_ptr<PipelineRuntime> make_pipeline(nn::Llama& model, dist::ProcessGroup& pp,
                                               const PipelineOptions& options) {
  const int n_layers = static_cast<int>(model.config().n_layers);
  Schedule schedule;
  if (!options.schedule_csv.empty()) {
    schedule = read_schedule_csv(options.schedule_csv);
    if (schedule.microbatches != options.microbatches) {
      throw InvalidArgument("pipeline_parallel_schedule_csv runs " +
                            std::to_string(schedule.microbatches) +
                            " micro-batches; the batch "
                            "and pipeline_parallel_microbatch_size make " +
                            std::to_string(options.microbatches));
    }
  } else {
    const ScheduleKind kind = parse_schedule_kind(options.schedule);
    schedule = make_schedule(kind, pp.size(),
                             stages_per_rank(kind, n_layers, pp.size(), options.layers_per_stage),
                             options.microbatches);
  }
  auto layers = split_layers(n_layers, schedule.num_stages(), options.layers_per_stage);
  return std::make_unique<PipelineRuntime>(model, pp, std::move(schedule), std::move(layers));
}

// "mesh pp 2 x tp 2; world ranks by (pp, tp): 0 (0, 0), 1 (0, 1), 2 (1, 0), 3 (1, 1)".
std::string describe_mesh(const DeviceMesh& mesh) {
  std::string shape, names;
  for (const auto& [name, n] : mesh.dims()) {
    shape += (shape.empty() ? "" : " x ") + name + " " + std::to_string(n);
    names += (names.empty() ? "" : ", ") + name;
  }
  std::string text = "mesh " + shape + "; world ranks by (" + names + "):";
  for (int rank = 0; rank < mesh.world().size(); ++rank) {
    const std::vector<int> coordinates = mesh.coordinates_of(rank);
    text += rank == 0 ? " " : ", ";
    text += std::to_string(rank) + " (";
    for (std::size_t d = 0; d < coordinates.size(); ++d) {
      text += (d == 0 ? "" : ", ");
      text += std::to_string(coordinates[d]);
    }
    text += ")";
  }
  return text;
}

class Parallelized : public ParallelModel {
 public:
  Parallelized(nn::Llama& model, DeviceMesh* mesh, const ParallelOptions& options)
      : model_(model), mesh_(mesh), options_(options) {
    const ParallelDims& d = options.dims;
    d.validate(mesh != nullptr ? mesh->world().size() : 1);
    if (options.layout_invariant) check_layout_invariant(options);
    pp_ = group(mesh, "pp");
    if (pp_ != nullptr) {
      pipeline_ = make_pipeline(model, *pp_, options.pipeline);
    }
    tp_ = group(mesh, "tp");
    if (tp_ != nullptr) {
      tp_adapter_ =
          apply_tensor_parallel(model, *tp_, options.sequence_parallel, options.loss_parallel);
    }
    cp_ = group(mesh, "cp");
    if (cp_ != nullptr) {
      cp_adapter_ = std::make_shared<ProcessGroupContextParallel>(*cp_);
      model.apply_context_parallel({cp_adapter_, options.cp_exchange});
    }
    replica_ = coordinate(mesh, "dp_replicate");
    data_rank_ = replica_ * d.dp_shard + coordinate(mesh, "dp_shard");
    // The context-parallel ranks hold the same parameters and compute gradients from different
    // tokens: the data-parallel wrappers reduce over them too, FSDP sharding over dp_shard x
    // cp (as TorchTitan does), DDP replicating over dp_replicate x cp.
    if (d.dp_shard > 1) {
      dp_ = std::make_unique<Sharded>(model, *data_group(mesh, "dp_shard"),
                                      group(mesh, "dp_replicate"), options);
    } else {
      dp_ = std::make_unique<Replicated>(model, data_group(mesh, "dp_replicate"), options);
    }
    if (pipeline_) {
      pipeline_->on_backward([this](bool may_reduce) { dp_->hold_reductions(!may_reduce); },
                             [this] { dp_->reduce_held(); });
    }
  }

  nn::Llama& model() override { return model_; }
  int data_rank() const override { return data_rank_; }
  int data_size() const override { return options_.dims.data_parallel(); }
  void init_weights(std::uint64_t seed) override { dp_->init_weights(seed); }
  void zero_grad() override {
    dp_->zero_grad();
    model_.parameters().leaf_trees().clear();
    micro_batches_ = 0;
  }
  double forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                          std::int64_t batch, std::int64_t seq, double loss_scale) override {
    if (options_.layout_invariant) return run_on_leaves(tokens, targets, batch, seq, loss_scale);
    if (cp_ != nullptr) {
      const Chunks c = chunks_of(tokens, targets, batch, seq);
      return run(c.tokens.data(), c.targets.data(), batch, c.seq, loss_scale / cp_->size()) /
             cp_->size();
    }
    return run(tokens, targets, batch, seq, loss_scale);
  }
  double evaluate(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                  std::int64_t seq) override {
    if (cp_ != nullptr) {
      const Chunks c = chunks_of(tokens, targets, batch, seq);
      return forward_only(c.tokens.data(), c.targets.data(), batch, c.seq) / cp_->size();
    }
    return forward_only(tokens, targets, batch, seq);
  }
  void prepare_sync() override { dp_->prepare_sync(); }
  void finish_sync() override {
    add_seconds(seconds_, [&] { dp_->finish_sync(); });
  }

  // Each element of the whole model's gradient is counted once: a tensor-parallel slice by
  // its rank, a parameter every tensor-parallel peer holds by the first, and replicas
  // (which hold the same) by the first; pipeline stages hold different parameters. One
  // all-reduce over the world sums the rest. Context-parallel ranks are replicas under DDP,
  // shards under FSDP.
  double clip_grad_norm(double max_norm) override {
    if (options_.layout_invariant) return clip_grad_norm_by_rows(max_norm);
    const int tp_rank = tp_ != nullptr ? tp_->rank() : 0;
    const double local = dp_->grad_sum_squares(
        [tp_rank](const nn::Parameter& p) { return p.sharded() || tp_rank == 0; });
    const bool cp_replica = cp_ != nullptr && options_.dims.dp_shard == 1 && cp_->rank() > 0;
    const double norm = std::sqrt(sum_over_world(replica_ == 0 && !cp_replica ? local : 0.0));
    const double factor = max_norm / (norm + 1e-6);
    if (max_norm > 0 && factor < 1.0) dp_->scale_grads(static_cast<float>(factor));
    return norm;
  }

  void step(double lr) override { dp_->step(lr); }

  double sum_over_data(double value) override {
    const bool counted = (tp_ == nullptr || tp_->rank() == 0) &&
                         (pipeline_ == nullptr || pipeline_->holds_last_stage());
    return sum_over_world(counted ? value : 0.0);
  }

  // Invariant: over the world, where only the last pipeline stages hold loss blocks, each its
  // data rank's leaves.
  double step_loss(double shares) override {
    if (!options_.layout_invariant) return sum_over_data(shares);
    double sum = 0;
    add_seconds(seconds_, [&] {
      sum = LeafReducer::sum_losses(mesh_ != nullptr ? &mesh_->world() : nullptr,
                                    model_.parameters().leaf_trees());
    });
    return sum / static_cast<double>(global_tokens_);
  }

  // The data-parallel roots (data coordinates 0) hold whole slices; tensor parallelism then
  // gathers the slices to each stage's first rank, and the pipeline the stages to world rank 0.
  std::pair<nn::StateDict, nn::AdamWState> full_state() override {
    auto state = replica_ == 0 ? dp_->state() : std::pair<nn::StateDict, nn::AdamWState>{};
    if (data_rank_ != 0 || (cp_ != nullptr && cp_->rank() != 0)) return {};
    auto& [params, optimizer] = state;
    if (tp_ != nullptr) {
      const nn::ParameterList& like = model_.parameters();
      state = {gather_full(params, like, *tp_),
               {gather_full(optimizer.exp_avg, like, *tp_),
                gather_full(optimizer.exp_avg_sq, like, *tp_), optimizer.steps}};
      if (tp_->rank() != 0) return {};
    }
    if (pp_ != nullptr) {
      for (nn::StateDict* dict : {&params, &optimizer.exp_avg, &optimizer.exp_avg_sq})
        gather_state_dicts(*dict, *pp_);
    }
    return state;
  }

  // A held run's box in the whole tensor: the tensor-parallel slice, then its rows.
  std::vector<StatePiece> state_layout() override {
    std::vector<StatePiece> layout;
    for (const DataParallel::Held& h : dp_->held()) {
      const nn::Parameter& p = *h.param;
      StatePiece piece{h.kind + p.name, p.full_shape,
                       std::vector<std::int64_t>(p.full_shape.size()), p.value.shape()};
      if (p.sharded()) piece.offsets[static_cast<std::size_t>(p.sharding.dim)] = p.shard_offset();
      if (!piece.sizes.empty()) {
        piece.offsets[0] += h.first_row;
        piece.sizes[0] = h.rows;
      }
      layout.push_back(std::move(piece));
    }
    return layout;
  }
  void copy_state(std::vector<Tensor>& into) override {
    const std::vector<DataParallel::Held> held = dp_->held();
    if (into.empty()) {
      for (const StatePiece& piece : state_layout()) into.push_back(Tensor::zeros(piece.sizes));
    }
    if (into.size() != held.size()) {
      throw InvalidArgument("copy_state: " + std::to_string(into.size()) + " tensors for " +
                            std::to_string(held.size()) + " pieces");
    }
    for (std::size_t i = 0; i < held.size(); ++i)
      std::copy_n(held[i].data, into[i].numel(), into[i].data<float>());
  }
  void load_state_values(const std::vector<Tensor>& values, std::int64_t optimizer_steps) override {
    const std::vector<StatePiece> layout = state_layout();
    if (values.size() != layout.size()) {
      throw InvalidArgument("load_state_values: " + std::to_string(values.size()) +
                            " tensors for " + std::to_string(layout.size()) + " pieces");
    }
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (values[i].shape() != layout[i].sizes || values[i].dtype() != DType::kFloat32) {
        throw InvalidArgument("load_state_values: " + layout[i].name + " is " +
                              shape_string(values[i].shape()) + ", this rank holds " +
                              shape_string(layout[i].sizes));
      }
    }
    const std::vector<DataParallel::Held> held = dp_->held();
    for (std::size_t i = 0; i < held.size(); ++i) {
      const Tensor c = values[i].contiguous();
      std::copy_n(c.data<float>(), c.numel(), held[i].data);
    }
    dp_->held_loaded(optimizer_steps);
  }
  std::int64_t optimizer_steps() const override { return dp_->optimizer_steps(); }

  void check_replicas_identical() override { dp_->check_replicas_identical(); }

  double communication_seconds() const override {
    return seconds_ + (tp_adapter_ ? tp_adapter_->seconds() : 0.0) +
           (cp_adapter_ ? cp_adapter_->seconds() : 0.0) +
           (pipeline_ ? pipeline_->wait_seconds() : 0.0);
  }

  MemoryReport memory() const override {
    MemoryReport report;
    dp_->memory(report);
    report.activations = pipeline_ ? pipeline_->peak_activation_bytes() : model_.activation_bytes();
    report.one_process = 4 * bytes_of_floats(model_.whole_numel());
    return report;
  }

  std::vector<std::string> describe(bool with_peaks) const override {
    std::vector<std::string> lines;
    if (mesh_ != nullptr && !mesh_->dims().empty() && !with_peaks)
      lines.push_back(describe_mesh(*mesh_));
    if (pipeline_) lines.push_back(describe_pipeline(with_peaks));
    if (cp_ != nullptr && !with_peaks) {
      const int n = cp_->size();
      const bool ring = options_.cp_exchange == nn::KeyValueExchange::kRing;
      lines.push_back("context parallel " + std::to_string(n) + ": each sequence in " +
                      std::to_string(2 * n) + " chunks, rank r of the ring holding chunks r and " +
                      std::to_string(2 * n - 1) + " - r; keys and values " +
                      (ring ? "around the ring (alltoall)" : "all-gathered (allgather)"));
    }
    if (tp_ != nullptr && !with_peaks) {  // once, at the start
      const nn::TensorParallel& tp = model_.tensor_parallel();
      lines.push_back("tensor parallel " + std::to_string(tp.size()) + ": " +
                      (tp.sequence_parallel ? "sequence parallel" : "no sequence parallelism") +
                      ", " + (tp.loss_parallel ? "loss parallel" : "logits gathered for the loss"));
    }
    dp_->describe(lines, with_peaks);
    return lines;
  }

 private:
  static void check_layout_invariant(const ParallelOptions& options) {
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

  // The layout-invariant norm: each dimension-0 row's sum of squares from the first replica
  // that holds it, zeros elsewhere (a sum of one term and zeros is exact in any order), then
  // added in the model's row order.
  double clip_grad_norm_by_rows(double max_norm) {
    FirstRow first_row;
    std::size_t rows = 0;
    for (const auto& [name, shape] : model_.whole_parameters()) {
      first_row[name] = rows;
      rows += shape.empty() ? 1 : static_cast<std::size_t>(shape[0]);
    }
    std::vector<double> sums(rows, 0.0);
    if (replica_ == 0) dp_->row_sums_of_squares(sums, first_row);
    if (mesh_ != nullptr) add_seconds(seconds_, [&] { mesh_->world().all_reduce(sums); });
    double sum = 0;
    for (const double s : sums) sum += s;
    const double norm = std::sqrt(sum);
    const double factor = max_norm / (norm + 1e-6);
    if (max_norm > 0 && factor < 1.0) dp_->scale_grads(static_cast<float>(factor));
    return norm;
  }

  // Sequence i of data rank r's micro-batch m is sequence (m x ranks + r) x batch + i of the
  // step's global batch (the data loader's order), each sequence one leaf.
  double run_on_leaves(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                       std::int64_t seq, double loss_scale) {
    if (seq % kernels::product_rows() != 0) {
      throw InvalidArgument(
          "layout-invariant training needs products of whole sequences: call "
          "kernels::set_product_rows with a divisor of " +
          std::to_string(seq) + " rows (it is " + std::to_string(kernels::product_rows()) + ")");
    }
    nn::LeafTrees& trees = model_.parameters().leaf_trees();
    const std::int64_t micro = micro_batches_++;
    trees.start((micro * data_size() + data_rank_) * batch, seq);
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

  double run(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
             std::int64_t seq, double loss_scale) {
    if (pipeline_) return pipeline_->forward_backward(tokens, targets, batch, seq, loss_scale);
    const double loss = model_.forward(tokens, targets, batch, seq);
    model_.backward(loss_scale);
    return loss;
  }
  double forward_only(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                      std::int64_t seq) {
    if (pipeline_) return pipeline_->evaluate(tokens, targets, batch, seq);
    return model_.forward(tokens, targets, batch, seq);
  }

  // This context-parallel rank's two chunks of each sequence, laid out per pipeline
  // micro-batch (the runtime cuts the rows into micro-batches).
  struct Chunks {
    std::vector<std::int32_t> tokens, targets;
    std::int64_t seq;  // per sequence: two chunks
  };
  Chunks chunks_of(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                   std::int64_t seq) const {
    const int r = cp_->rank(), n = cp_->size();
    const int groups = pipeline_ ? pipeline_->schedule().microbatches : 1;
    return {context_parallel_rows(tokens, batch, seq, r, n, groups),
            context_parallel_rows(targets, batch, seq, r, n, groups), seq / n};
  }

  // The group data parallelism reduces over along `dim`: with context parallelism, `dim` and
  // cp flattened (or cp alone when `dim` is absent).
  dist::ProcessGroup* data_group(DeviceMesh* mesh, const std::string& dim) {
    if (cp_ == nullptr) return group(mesh, dim);
    if (!mesh->has(dim)) return cp_;
    const std::string name = dim + "_cp";
    mesh->flatten({dim, "cp"}, name);
    return &mesh->group(name);
  }

  std::string describe_pipeline(bool at_end) const {
    const Schedule& s = pipeline_->schedule();
    if (at_end) return describe_idle();
    std::string line = "pipeline parallel " + std::to_string(s.ranks) + ": " +
                       std::to_string(s.num_stages()) + " stages, " +
                       std::to_string(s.microbatches) + " micro-batches; layers";
    for (int stage = 0; stage < s.num_stages(); ++stage) {
      const nn::LayerRange r = pipeline_->stage_layers()[static_cast<std::size_t>(stage)];
      char part[64];
      std::snprintf(part, sizeof(part), " %d-%d (rank %d)", r.first, r.last - 1,
                    s.stage_to_rank[static_cast<std::size_t>(stage)]);
      line += part;
    }
    // The timeline with a backward taking two forwards' time, one column per forward.
    const Simulation simulation =
        simulate(s, {.forward = 1, .backward_input = 1, .backward_weight = 1});
    char bubble[96];
    std::snprintf(bubble, sizeof(bubble), "; simulated bubble %.1f%% (backward = 2 forwards):\n",
                  100 * simulation.bubble_fraction);
    std::string timeline = format_timeline(s, simulation);
    if (!timeline.empty() && timeline.back() == '\n') timeline.pop_back();
    return line + bubble + timeline;
  }

  // Every rank's idle share, gathered over the world (a collective: every rank calls it),
  // measured as simulate() defines it (1 - busy / makespan, the makespan of each step from the
  // first start to the last end among the ranks of the rank's own pipeline: those whose
  // coordinates differ in pp only), beside the schedule simulated with each pipeline rank's
  // mean measured F, B, I and W times (averaged over the ranks that share its stages).
  std::string describe_idle() const {
    const ActionCosts c = pipeline_->measured_costs();
    std::vector<double> mine{static_cast<double>(pp_->rank()), c.forward, c.backward_input,
                             c.backward_weight, c.full_backward.value_or(-1)};
    constexpr std::size_t kHead = 5;
    for (const PipelineRuntime::StepTimes& t : pipeline_->step_times())
      mine.insert(mine.end(), {t.start, t.end, t.busy});
    const std::size_t n = mine.size(), steps = (n - kHead) / 3;
    const auto world = static_cast<std::size_t>(mesh_->world().size());
    std::vector<double> all(n * world);
    mesh_->world().all_gather(all, mine);
    const Simulation simulated = simulate(pipeline_->schedule(), stage_costs(all, n));
    std::string text =
        "pipeline idle per rank (1 - its compute time / the steps' makespan over its pipeline), "
        "and simulated with each stage's measured forward and backward times";
    for (std::size_t r = 0; r < world; ++r) {
      const double* v = &all[r * n];
      double busy = 0, makespan = 0;  // summed over the steps
      for (std::size_t step = 0; step < steps; ++step) {
        busy += v[kHead + 3 * step + 2];
        double first = v[kHead + 3 * step], last = v[kHead + 3 * step + 1];
        for (std::size_t peer = 0; peer < world; ++peer) {
          if (!same_pipeline(r, peer)) continue;
          first = std::min(first, all[peer * n + kHead + 3 * step]);
          last = std::max(last, all[peer * n + kHead + 3 * step + 1]);
        }
        makespan += last - first;
      }
      char line[128];
      std::snprintf(line, sizeof(line),
                    "\n  rank %zu (pp rank %d): idle %.1f%% (computed %.2f of %.2f s), simulated "
                    "%.1f%%",
                    r, static_cast<int>(v[0]), makespan > 0 ? 100 * (1 - busy / makespan) : 0.0,
                    busy, makespan, 100 * simulated.idle_fraction[static_cast<std::size_t>(v[0])]);
      text += line;
    }
    return text;
  }

  std::string pipeline_timeline_svg() const override {
    if (!pipeline_) return "";
    const auto& times = pipeline_->last_step_actions();
    // Rows of equal length for the gather: pp rank, action count, then (start, end) pairs.
    std::vector<std::int64_t> longest{static_cast<std::int64_t>(times.size())};
    mesh_->world().all_reduce(longest, dist::ReduceOp::kMax);
    const std::size_t n = 2 + 2 * static_cast<std::size_t>(longest[0]);
    std::vector<double> mine(n, 0.0), all(n * static_cast<std::size_t>(mesh_->world().size()));
    mine[0] = pp_->rank();
    mine[1] = static_cast<double>(times.size());
    for (std::size_t i = 0; i < times.size(); ++i) {
      mine[2 + 2 * i] = times[i].start;
      mine[3 + 2 * i] = times[i].end;
    }
    mesh_->world().all_gather(all, mine);
    const Schedule& schedule = pipeline_->schedule();
    std::vector<std::vector<double>> start(static_cast<std::size_t>(schedule.ranks)),
        end(start.size());
    for (std::size_t r = 0; r * n < all.size(); ++r) {
      if (!same_pipeline(0, r)) continue;
      const double* v = &all[r * n];
      const auto p = static_cast<std::size_t>(v[0]);
      const auto count = static_cast<std::size_t>(v[1]);
      if (count != schedule.actions[p].size()) return "";  // no step run yet
      for (std::size_t i = 0; i < count; ++i) {
        start[p].push_back(v[2 + 2 * i]);
        end[p].push_back(v[3 + 2 * i]);
      }
    }
    const std::string name =
        options_.pipeline.schedule_csv.empty() ? options_.pipeline.schedule : "CSV schedule";
    return measured_timeline_svg(schedule, start, end,
                                 "measured: " + name + ", " + std::to_string(schedule.ranks) +
                                     " ranks, " + std::to_string(schedule.microbatches) +
                                     " micro-batches, last step");
  }

  // Whether world ranks a and b are stages of one pipeline (coordinates equal but for pp).
  bool same_pipeline(std::size_t a, std::size_t b) const {
    std::vector<int> ca = mesh_->coordinates_of(static_cast<int>(a));
    std::vector<int> cb = mesh_->coordinates_of(static_cast<int>(b));
    ca[0] = cb[0] = 0;  // pp comes first in the mesh
    return ca == cb;
  }

  // Per pipeline rank, the mean of the measured costs of the world ranks at that pp
  // coordinate (rows of `n` values: pp rank, F, I, W, full B or -1, ...).
  std::vector<ActionCosts> stage_costs(const std::vector<double>& all, std::size_t n) const {
    std::vector<ActionCosts> costs(static_cast<std::size_t>(pipeline_->schedule().ranks),
                                   ActionCosts{0, 0, 0});
    std::vector<double> full(costs.size()), replicas(costs.size());
    for (std::size_t r = 0; r * n < all.size(); ++r) {
      const double* v = &all[r * n];
      const auto p = static_cast<std::size_t>(v[0]);
      costs[p].forward += v[1];
      costs[p].backward_input += v[2];
      costs[p].backward_weight += v[3];
      full[p] += v[4];
      replicas[p] += 1;
    }
    for (std::size_t p = 0; p < costs.size(); ++p) {
      costs[p].forward /= replicas[p];
      costs[p].backward_input /= replicas[p];
      costs[p].backward_weight /= replicas[p];
      if (full[p] >= 0) costs[p].full_backward = full[p] / replicas[p];
    }
    return costs;
  }

  double sum_over_world(double value) {
    if (mesh_ == nullptr) return value;
    std::vector<double> v{value};
    add_seconds(seconds_, [&] { mesh_->world().all_reduce(v); });
    return v[0];
  }

  nn::Llama& model_;
  DeviceMesh* mesh_;
  ParallelOptions options_;
  dist::ProcessGroup *pp_ = nullptr, *tp_ = nullptr, *cp_ = nullptr;
  std::unique_ptr<PipelineRuntime> pipeline_;
  std::shared_ptr<ProcessGroupTensorParallel> tp_adapter_;
  std::shared_ptr<ProcessGroupContextParallel> cp_adapter_;
  double seconds_ = 0;  // blocked in finish_sync and the world all-reduces
  int replica_ = 0, data_rank_ = 0;
  std::unique_ptr<DataParallel> dp_;
  std::int64_t micro_batches_ = 0;  // since zero_grad
  std::int64_t global_tokens_ = 1;  // in a step's global batch
};

}  // namespace

std::vector<std::pair<std::string, int>> ParallelDims::mesh_dims() const {
  std::vector<std::pair<std::string, int>> dims;
  for (const auto& [name, n] : {std::pair<std::string, int>{"pp", pp},
                                {"dp_replicate", dp_replicate},
                                {"dp_shard", dp_shard},
                                {"cp", cp},
                                {"tp", tp}}) {
    if (n > 1) dims.emplace_back(name, n);
  }
  return dims;
}

void ParallelDims::validate(int world) const {
  if (pp >= 1 && dp_replicate >= 1 && dp_shard >= 1 && cp >= 1 && tp >= 1 && product() == world)
    return;
  throw InvalidArgument(
      "parallelism: pipeline_parallel_degree " + std::to_string(pp) +
      " x data_parallel_replicate_degree " + std::to_string(dp_replicate) +
      " x data_parallel_shard_degree " + std::to_string(dp_shard) + " x context_parallel_degree " +
      std::to_string(cp) + " x tensor_parallel_degree " + std::to_string(tp) + " = " +
      std::to_string(product()) + " must equal the world size " + std::to_string(world) +
      " (weftrun --nproc-per-node, mpirun -np), each degree at least 1");
}

std::unique_ptr<ParallelModel> parallelize(nn::Llama& model, DeviceMesh* mesh,
                                           const ParallelOptions& options) {
  return std::make_unique<Parallelized>(model, mesh, options);
}

}  // namespace weft::parallel
