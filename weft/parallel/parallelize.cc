#include "weft/parallel/parallelize.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>

#include "weft/base/error.h"
#include "weft/kernels/elementwise.h"
#include "weft/parallel/ddp.h"
#include "weft/parallel/pipeline.h"
#include "weft/parallel/tensor_parallel.h"

namespace weft::parallel {
namespace {

using Counted = std::function<bool(const nn::Parameter&)>;
using Clock = std::chrono::steady_clock;

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::int64_t bytes_of_floats(std::int64_t n) {
  return n * static_cast<std::int64_t>(sizeof(float));
}

// Pairs every tensor of `into` with the tensor of that name in `from`, checking that each is
// there with its shape (InvalidArgument otherwise): the copies to make, once every part of a
// state has been checked.
using Copies = std::vector<std::pair<const Tensor*, Tensor*>>;
Copies match_by_name(const nn::StateDict& from, nn::StateDict& into, const char* what) {
  if (from.size() != into.size()) {
    throw InvalidArgument(std::string("load: ") + std::to_string(from.size()) + " " + what +
                          " tensors for " + std::to_string(into.size()) + " parameters");
  }
  Copies pairs;
  for (auto& [name, target] : into) {
    const auto it = std::find_if(from.begin(), from.end(),
                                 [&](const auto& entry) { return entry.first == name; });
    if (it == from.end()) throw InvalidArgument(std::string("load: no ") + what + " for " + name);
    if (it->second.shape() != target.shape()) {
      throw InvalidArgument(std::string("load: ") + what + " " + name + " is " +
                            shape_string(it->second.shape()) + ", the model's is " +
                            shape_string(target.shape()));
    }
    pairs.emplace_back(&it->second, &target);
  }
  return pairs;
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
  // Pipeline stages: no reduction starts while held (DistributedDataParallel::hold_reductions);
  // reduce_held launches those held back (zero bubble, after the last W).
  virtual void hold_reductions(bool held) = 0;
  virtual void reduce_held() = 0;
  virtual void step(double lr) = 0;
  // The state whole over the data-parallel dimensions (this rank's tensor-parallel slices):
  // filled where the data coordinates are 0. Collective over the ranks whose replica
  // coordinate is 0.
  virtual std::pair<nn::StateDict, nn::AdamWState> state() = 0;
  virtual void load(const nn::StateDict& params, const nn::AdamWState& optimizer) = 0;
  virtual void check_replicas_identical() = 0;
  virtual void memory(MemoryReport& report) const = 0;
  virtual void describe(std::vector<std::string>& lines, bool with_peaks) const = 0;
};

// Every data-parallel rank holds the whole (tensor-parallel slice of the) model: one process,
// or DDP over `group`.
class Replicated : public DataParallel {
 public:
  Replicated(nn::Llama& model, dist::ProcessGroup* group, const ParallelOptions& options)
      : model_(model), adamw_(model.parameters(), options.optimizer) {
    if (group != nullptr && group->size() > 1) {
      ddp_ = std::make_unique<DistributedDataParallel>(model, *group, options.bucket_bytes);
    }
  }
  void init_weights(std::uint64_t seed) override { model_.init_weights(seed); }
  void zero_grad() override { model_.parameters().zero_grad(); }
  void prepare_sync() override {
    if (ddp_) ddp_->prepare_sync();
  }
  void finish_sync() override {
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
  void load(const nn::StateDict& params, const nn::AdamWState& optimizer) override {
    nn::AdamWState mine = adamw_.state();  // views: copying into them restores the moments
    const Copies exp_avg = match_by_name(optimizer.exp_avg, mine.exp_avg, "exp_avg");
    const Copies exp_avg_sq = match_by_name(optimizer.exp_avg_sq, mine.exp_avg_sq, "exp_avg_sq");
    model_.parameters().load_state_dict(params);  // checks everything before it copies
    for (const Copies& copies : {exp_avg, exp_avg_sq}) {
      for (auto [src, dst] : copies) dst->copy_from(*src);
    }
    adamw_.set_steps(optimizer.steps);
  }
  void check_replicas_identical() override {
    if (ddp_) ddp_->check_parameters_identical();
  }
  void memory(MemoryReport& report) const override {
    const std::int64_t bytes = bytes_of_floats(model_.parameters().numel());
    report.parameters = report.gradients = bytes;
    report.optimizer = 2 * bytes;
  }
  void describe(std::vector<std::string>& lines, bool) const override {
    if (ddp_) lines.push_back("ddp: " + std::to_string(ddp_->buckets()) + " gradient buckets");
  }

 private:
  nn::Llama& model_;
  nn::AdamW adamw_;
  std::unique_ptr<DistributedDataParallel> ddp_;
};

// FSDP over `shard`, HSDP with `replicate`.
class Sharded : public DataParallel {
 public:
  Sharded(nn::Llama& model, dist::ProcessGroup& shard, dist::ProcessGroup* replicate,
          const ParallelOptions& options)
      : fsdp_(model, shard, replicate, options.fsdp_mode, options.optimizer) {
    fsdp_.set_pipelined(options.dims.pp > 1);
  }
  void init_weights(std::uint64_t seed) override { fsdp_.init_weights(seed); }
  void zero_grad() override { fsdp_.zero_grad(); }
  void prepare_sync() override { fsdp_.prepare_sync(); }
  void finish_sync() override { fsdp_.finish_sync(); }
  double grad_sum_squares(const Counted& counted) const override {
    return fsdp_.local_grad_sum_squares(counted);
  }
  void scale_grads(float factor) override { fsdp_.scale_grads(factor); }
  void hold_reductions(bool held) override { fsdp_.hold_reductions(held); }
  void reduce_held() override { fsdp_.reduce_held(); }
  void step(double lr) override { fsdp_.step(lr); }
  std::pair<nn::StateDict, nn::AdamWState> state() override { return fsdp_.full_state(); }
  void load(const nn::StateDict& params, const nn::AdamWState& optimizer) override {
    fsdp_.load_full_state(params, optimizer);
  }
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

class Parallelized : public ParallelModel {
 public:
  Parallelized(nn::Llama& model, const DeviceMesh* mesh, const ParallelOptions& options)
      : model_(model), mesh_(mesh), options_(options) {
    const ParallelDims& d = options.dims;
    d.validate(mesh != nullptr ? mesh->world().size() : 1);
    pp_ = group(mesh, "pp");
    if (pp_ != nullptr) {
      pipeline_ = make_pipeline(model, *pp_, options.pipeline);
    }
    tp_ = group(mesh, "tp");
    if (tp_ != nullptr) {
      tp_adapter_ =
          apply_tensor_parallel(model, *tp_, options.sequence_parallel, options.loss_parallel);
    }
    replica_ = coordinate(mesh, "dp_replicate");
    data_rank_ = replica_ * d.dp_shard + coordinate(mesh, "dp_shard");
    if (d.dp_shard > 1) {
      dp_ = std::make_unique<Sharded>(model, *group(mesh, "dp_shard"), group(mesh, "dp_replicate"),
                                      options);
    } else {
      dp_ = std::make_unique<Replicated>(model, group(mesh, "dp_replicate"), options);
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
  void zero_grad() override { dp_->zero_grad(); }
  double forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                          std::int64_t batch, std::int64_t seq, double loss_scale) override {
    if (pipeline_) return pipeline_->forward_backward(tokens, targets, batch, seq, loss_scale);
    const double loss = model_.forward(tokens, targets, batch, seq);
    model_.backward(loss_scale);
    return loss;
  }
  double evaluate(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                  std::int64_t seq) override {
    if (pipeline_) return pipeline_->evaluate(tokens, targets, batch, seq);
    return model_.forward(tokens, targets, batch, seq);
  }
  void prepare_sync() override { dp_->prepare_sync(); }
  void finish_sync() override {
    const auto start = Clock::now();
    dp_->finish_sync();
    seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  }

  // Each element of the whole model's gradient is counted once: a tensor-parallel slice by
  // its rank, a parameter every tensor-parallel peer holds by the first, and replicas
  // (which hold the same) by the first; pipeline stages hold different parameters. One
  // all-reduce over the world sums the rest.
  double clip_grad_norm(double max_norm) override {
    const int tp_rank = tp_ != nullptr ? tp_->rank() : 0;
    const double local = dp_->grad_sum_squares(
        [tp_rank](const nn::Parameter& p) { return p.sharded() || tp_rank == 0; });
    const double norm = std::sqrt(sum_over_world(replica_ == 0 ? local : 0.0));
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

  // The data-parallel roots (data coordinates 0) hold whole slices; tensor parallelism then
  // gathers the slices to each stage's first rank, and the pipeline the stages to world rank 0.
  std::pair<nn::StateDict, nn::AdamWState> full_state() override {
    auto state = replica_ == 0 ? dp_->state() : std::pair<nn::StateDict, nn::AdamWState>{};
    if (data_rank_ != 0) return {};
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

  void load_full_state(const nn::StateDict& params, const nn::AdamWState& optimizer) override {
    if (tp_ == nullptr) {
      dp_->load(params, optimizer);
      return;
    }
    const nn::ParameterList& like = model_.parameters();
    dp_->load(take_slices(params, like),
              {take_slices(optimizer.exp_avg, like), take_slices(optimizer.exp_avg_sq, like),
               optimizer.steps});
  }

  void check_replicas_identical() override { dp_->check_replicas_identical(); }

  double communication_seconds() const override {
    return seconds_ + (tp_adapter_ ? tp_adapter_->seconds() : 0.0) +
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
    if (pipeline_) lines.push_back(describe_pipeline(with_peaks));
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
  std::string describe_pipeline(bool at_end) const {
    const Schedule& s = pipeline_->schedule();
    if (at_end) {
      char line[200];
      std::snprintf(line, sizeof(line),
                    "pipeline: this rank waited for other stages %.1f%% of its forward/backward "
                    "time (%.2f s); the schedule simulated with its measured forward and "
                    "backward times: %.1f%%",
                    100 * pipeline_->measured_idle_fraction(), pipeline_->wait_seconds(),
                    100 * pipeline_->simulated_idle_fraction());
      return line;
    }
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

  double sum_over_world(double value) {
    if (mesh_ == nullptr) return value;
    const auto start = Clock::now();
    std::vector<double> v{value};
    mesh_->world().all_reduce(v);
    seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
    return v[0];
  }

  nn::Llama& model_;
  const DeviceMesh* mesh_;
  ParallelOptions options_;
  dist::ProcessGroup *pp_ = nullptr, *tp_ = nullptr;
  std::unique_ptr<PipelineRuntime> pipeline_;
  std::shared_ptr<ProcessGroupTensorParallel> tp_adapter_;
  double seconds_ = 0;  // blocked in finish_sync and the world all-reduces
  int replica_ = 0, data_rank_ = 0;
  std::unique_ptr<DataParallel> dp_;
};

}  // namespace

std::vector<std::pair<std::string, int>> ParallelDims::mesh_dims() const {
  std::vector<std::pair<std::string, int>> dims;
  for (const auto& [name, n] : {std::pair<std::string, int>{"pp", pp},
                                {"dp_replicate", dp_replicate},
                                {"dp_shard", dp_shard},
                                {"tp", tp}}) {
    if (n > 1) dims.emplace_back(name, n);
  }
  return dims;
}

void ParallelDims::validate(int world) const {
  if (pp >= 1 && dp_replicate >= 1 && dp_shard >= 1 && tp >= 1 && product() == world) return;
  throw InvalidArgument(
      "parallelism: pipeline_parallel_degree " + std::to_string(pp) +
      " x data_parallel_replicate_degree " + std::to_string(dp_replicate) +
      " x data_parallel_shard_degree " + std::to_string(dp_shard) + " x tensor_parallel_degree " +
      std::to_string(tp) + " = " + std::to_string(product()) + " must equal the world size " +
      std::to_string(world) + " (weftrun --nproc-per-node), each degree at least 1");
}

std::unique_ptr<ParallelModel> parallelize(nn::Llama& model, const DeviceMesh* mesh,
                                           const ParallelOptions& options) {
  return std::make_unique<Parallelized>(model, mesh, options);
}

}  // namespace weft::parallel
