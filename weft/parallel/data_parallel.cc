#include "weft/parallel/data_parallel.h"

#include <cstdio>

#include "weft/kernels/elementwise.h"
#include "weft/parallel/checks.h"
#include "weft/parallel/ddp.h"
#include "weft/parallel/fsdp.h"
#include "weft/parallel/leaf_reduce.h"

namespace weft::parallel {
namespace {

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::int64_t bytes_of_floats(std::int64_t n) {
  return n * static_cast<std::int64_t>(sizeof(float));
}

class Replicated : public DataParallel {
 public:
  Replicated(nn::Llama& model, dist::ProcessGroup* group, const ParallelOptions& options,
             GradientSums sums)
      : model_(model),
        adamw_(model.parameters(), options.optimizer),
        group_(group),
        canonical_sums_(sums == GradientSums::kCanonicalTree) {
    if (group != nullptr && group->size() > 1 && !canonical_sums_) {
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
    if (canonical_sums_) leaf_reducer_.reduce(group_, model_.parameters().leaf_trees());
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
  std::vector<GradientRows> gradient_rows() override {
    std::vector<GradientRows> all;
    for (const auto& p : model_.parameters().all()) {
      const std::int64_t n = p->grad.ndim() == 0 ? 1 : p->grad.size(0);
      all.push_back({p.get(), 0, n, n == 0 ? 0 : p->grad.numel() / n, p->grad.data<float>()});
    }
    return all;
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
    report.canonical_sums += leaf_reducer_.bytes();
  }
  void describe(std::vector<std::string>& lines, bool with_peaks) const override {
    if (with_peaks) return;  // once, at the start
    if (ddp_) lines.push_back("ddp: " + std::to_string(ddp_->buckets()) + " gradient buckets");
    if (canonical_sums_ && group_ != nullptr && group_->size() > 1)
      lines.push_back(
          "ddp: layout-invariant, gradients summed in the canonical tree after "
          "backward (all-to-all and all-gather)");
  }

 private:
  nn::Llama& model_;
  nn::AdamW adamw_;
  dist::ProcessGroup* group_;
  bool canonical_sums_;
  LeafReducer leaf_reducer_;
  std::unique_ptr<DistributedDataParallel> ddp_;
};

class Sharded : public DataParallel {
 public:
  Sharded(nn::Llama& model, dist::ProcessGroup& shard, dist::ProcessGroup* replicate,
          const ParallelOptions& options, GradientSums sums)
      : fsdp_(model, shard, replicate, options.fsdp_mode, options.optimizer) {
    fsdp_.set_pipelined(options.dims.pp > 1);
    fsdp_.set_reduce_dtype(options.reduce_dtype);
    fsdp_.set_param_dtype(options.param_dtype);
    fsdp_.set_layout_invariant(sums == GradientSums::kCanonicalTree);
  }
  void init_weights(std::uint64_t seed) override { fsdp_.init_weights(seed); }
  void zero_grad() override { fsdp_.zero_grad(); }
  void prepare_sync() override { fsdp_.prepare_sync(); }
  void finish_sync() override { fsdp_.finish_sync(); }
  double grad_sum_squares(const Counted& counted) const override {
    return fsdp_.local_grad_sum_squares(counted);
  }
  void scale_grads(float factor) override { fsdp_.scale_grads(factor); }
  std::vector<GradientRows> gradient_rows() override {
    std::vector<GradientRows> all;
    for (const auto& r : fsdp_.shard_rows())
      all.push_back({r.param, r.first_row, r.rows, r.cols, r.grad});
    return all;
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
    report.canonical_sums += m.leaf_blocks;
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

}  // namespace

std::unique_ptr<DataParallel> make_replicated(nn::Llama& model, dist::ProcessGroup* group,
                                              const ParallelOptions& options, GradientSums sums) {
  return std::make_unique<Replicated>(model, group, options, sums);
}

std::unique_ptr<DataParallel> make_sharded(nn::Llama& model, dist::ProcessGroup& shard,
                                           dist::ProcessGroup* replicate,
                                           const ParallelOptions& options, GradientSums sums) {
  return std::make_unique<Sharded>(model, shard, replicate, options, sums);
}

}  // namespace weft::parallel
