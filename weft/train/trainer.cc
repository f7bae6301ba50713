#include "weft/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "weft/base/simd.h"
#include "weft/kernels/blas.h"
#include "weft/kernels/parallel.h"

namespace weft::train {
namespace {

using Clock = std::chrono::steady_clock;

bool every(std::int64_t step, std::int64_t freq, std::int64_t last) {
  return step % freq == 0 || step == last;
}

}  // namespace

Trainer::Trainer(Config config, std::ostream& out, bool terminal,
                 std::shared_ptr<dist::ProcessGroup> world)
    : config_(std::move(config)),
      world_(std::move(world)),
      out_(world_ && world_->rank() != 0 ? null_out_ : out),
      terminal_(terminal),
      data_(config_.training.dataset_path, config_.training.validation_fraction,
            config_.training.seq_len),
      model_(config_.model),
      train_loader_(data_.train(), config_.training.batch_size, config_.training.seq_len,
                    static_cast<std::uint64_t>(config_.training.seed), "train") {
  // weft splits the work between the threads itself; OpenBLAS runs single-threaded inside.
  kernels::set_blas_threads(1);
  kernels::set_threads(static_cast<int>(config_.training.threads));
  model_.set_activation_checkpointing(config_.training.activation_checkpointing);
  setup_data_parallel();
  // FSDP initialises its shards only: the whole model never exists on one rank.
  const auto seed = static_cast<std::uint64_t>(config_.training.seed);
  if (fsdp_) {
    fsdp_->init_weights(seed);
  } else {
    model_.init_weights(seed);
  }
  if (config_.checkpoint.resume) resume();
  if (ddp_) ddp_->check_parameters_identical();  // what every rank starts from, resumed or not
  const bool measured = config_.metrics.peak_gflops <= 0;
  peak_gflops_ = measured ? measure_peak_gflops(static_cast<int>(config_.training.threads))
                          : config_.metrics.peak_gflops;
  char line[200];
  std::snprintf(line, sizeof(line),
                "model: %.2fM parameters, %.1f MFLOP per token; peak %.0f GFLOP/s (%s, %lld "
                "thread%s); kernels: %s",
                static_cast<double>(model_.parameters().numel()) / 1e6,
                model_.flops_per_token(config_.training.seq_len) / 1e6, peak_gflops_,
                measured ? "sgemm measured" : "metrics.peak_gflops",
                static_cast<long long>(config_.training.threads),
                config_.training.threads == 1 ? "" : "s", simd::current_target().c_str());
  out_ << line << std::endl;
  if (fsdp_) log_state_memory(false);
  metrics_ = std::make_unique<MetricsLogger>(out_, terminal_ && dp_rank_ == 0,
                                             dp_rank_ == 0 ? config_.metrics.jsonl_path : "",
                                             config_.training.steps);
}

Trainer::~Trainer() = default;

// [parallelism] as TorchTitan reads it: a replicate degree alone is DDP, a shard degree alone
// FSDP, both HSDP; the data-parallel rank is the world rank (dp_shard varies fastest).
void Trainer::setup_data_parallel() {
  const std::int64_t world = world_ ? world_->size() : 1;
  const auto& p = config_.parallelism;
  const std::int64_t shard = p.data_parallel_shard_degree;
  const std::int64_t replicate =
      p.data_parallel_replicate_degree == -1 ? world / shard : p.data_parallel_replicate_degree;
  if (replicate * shard != world) {
    throw ConfigError("parallelism: data_parallel_replicate_degree " + std::to_string(replicate) +
                      " x data_parallel_shard_degree " + std::to_string(shard) +
                      " must equal the " + "world size " + std::to_string(world) +
                      " (weftrun --nproc-per-node)");
  }
  dp_rank_ = world_ ? world_->rank() : 0;
  dp_size_ = static_cast<int>(world);
  if (shard == 1) optimizer_ = std::make_unique<nn::AdamW>(model_.parameters(), config_.optimizer);
  if (!world_) return;
  mesh_ = std::make_unique<parallel::DeviceMesh>(
      world_,
      std::vector<std::pair<std::string, int>>{{"dp_replicate", static_cast<int>(replicate)},
                                               {"dp_shard", static_cast<int>(shard)}});
  if (shard == 1) {
    ddp_ = std::make_unique<parallel::DistributedDataParallel>(
        model_, mesh_->group("dp_replicate"),
        static_cast<std::size_t>(p.bucket_size_mb * (1 << 20)));
    return;
  }
  fsdp_ = std::make_unique<parallel::FullyShardedDataParallel>(
      model_, mesh_->group("dp_shard"), replicate > 1 ? &mesh_->group("dp_replicate") : nullptr,
      parallel::parse_sharding_mode(p.fsdp_mode), config_.optimizer);
}

// Checkpoints hold the full state whatever the layout, so any run can resume any checkpoint.
void Trainer::resume() {
  const auto path = latest_checkpoint(config_.checkpoint.folder);
  if (path) load(*path);
  if (!world_) return;
  // Every rank must have found the same checkpoint (or none): a folder that is not shared
  // would otherwise start the ranks from different states.
  std::vector<std::int64_t> low{state_.step}, high{state_.step};
  world_->all_reduce(low, dist::ReduceOp::kMin);
  world_->all_reduce(high, dist::ReduceOp::kMax);
  if (low[0] != high[0]) {
    throw checkpoint::CheckpointError("ranks resumed from different steps (" +
                                      std::to_string(low[0]) + " to " + std::to_string(high[0]) +
                                      ") of " + config_.checkpoint.folder +
                                      "; every rank must see the same checkpoint folder");
  }
}

void Trainer::load(const std::string& path) {
  if (fsdp_) {
    nn::StateDict params;
    nn::AdamWState optimizer;
    for (const auto& p : model_.parameters().all()) {
      params.emplace_back(p->name, Tensor::zeros(p->value.shape()));
      optimizer.exp_avg.emplace_back(p->name, Tensor::zeros(p->value.shape()));
      optimizer.exp_avg_sq.emplace_back(p->name, Tensor::zeros(p->value.shape()));
    }
    state_ = load_checkpoint(checkpoint::load_safetensors(path), path, params, &optimizer);
    fsdp_->load_full_state(params, optimizer);
  } else {
    state_ = load_checkpoint(path, model_, optimizer_.get());
  }
  train_loader_.set_batches_drawn(state_.loader_batches);
  out_ << "resumed from " << path << " at step " << state_.step << std::endl;
}

// Rank 0 writes (FSDP gathers the shards to it first); the others wait until it is complete.
void Trainer::save() {
  const std::string config_toml = to_toml(config_);
  std::string path;
  if (fsdp_) {
    // Replicas hold equal shards: only the one with rank 0 gathers (collective over its shard
    // group alone, so the others may skip it).
    const auto [params, optimizer] = mesh_->coordinate("dp_replicate") == 0
                                         ? fsdp_->full_state()
                                         : std::pair<nn::StateDict, nn::AdamWState>{};
    if (dp_rank_ == 0) {
      path = save_checkpoint(config_.checkpoint.folder, state_, params, optimizer, config_toml,
                             config_.checkpoint.keep_latest);
    }
  } else if (dp_rank_ == 0) {
    path = save_checkpoint(config_.checkpoint.folder, state_, model_, *optimizer_, config_toml,
                           config_.checkpoint.keep_latest);
  }
  if (dp_rank_ == 0) metrics_->log_line("saved checkpoint " + path);
  if (world_) world_->barrier();
}

void Trainer::log_state_memory(bool with_peak) {
  const parallel::ShardedMemory m = fsdp_->memory();
  const auto mib = [](std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  char line[256];
  std::snprintf(line, sizeof(line),
                "fsdp %s: %.1f MiB per rank held between steps (parameters %.1f, gradients %.1f, "
                "optimizer %.1f; one process: %.1f)",
                parallel::sharding_mode_name(fsdp_->mode()),
                mib(m.parameters + m.gradients + m.optimizer), mib(m.parameters), mib(m.gradients),
                mib(m.optimizer), mib(m.one_process));
  out_ << line << std::endl;
  if (!with_peak) return;
  std::snprintf(line, sizeof(line),
                "fsdp: during steps at most %.1f MiB more per rank in full copies and reduction "
                "buffers (%.1f MiB of buffers kept for reuse)",
                mib(m.unsharded_peak), mib(m.spare_buffers));
  out_ << line << std::endl;
}

double Trainer::global_mean(double local_share) {
  if (!world_) return local_share;
  std::vector<double> v{local_share};
  world_->all_reduce(v);
  return v[0];
}

// Each rank's loss is its share of the global mean (local mean / ranks / micro-batches), so
// the gradients DDP sums are those of the global mean loss.
double Trainer::train_step() {
  if (fsdp_) {
    fsdp_->zero_grad();
  } else {
    model_.parameters().zero_grad();
  }
  const std::int64_t micro = config_.training.gradient_accumulation_steps;
  const double share = 1.0 / static_cast<double>(micro * dp_size_);
  double loss = 0;
  for (std::int64_t m = 0; m < micro; ++m) {
    const Batch b = train_loader_.next(dp_rank_, dp_size_);
    loss += model_.forward(b.tokens.data(), b.targets.data(), b.batch, b.seq) * share;
    if (m ==
        micro - 1) {  // the others accumulate locally (FSDP's zero2 and full_shard reduce them)
      if (ddp_) ddp_->prepare_sync();
      if (fsdp_) fsdp_->prepare_sync();
    }
    model_.backward(share);
  }
  if (ddp_) ddp_->finish_sync();
  if (fsdp_) fsdp_->finish_sync();
  return global_mean(loss);
}

double Trainer::validate() {
  DataLoader loader(data_.validation(), config_.training.batch_size, config_.training.seq_len,
                    static_cast<std::uint64_t>(config_.training.seed), "validation");
  // Batches of the global batch size (batch x micro-batches x ranks), drawn as training draws
  // them: the validation loss does not depend on how the global batch is split.
  const std::int64_t batches =
      config_.validation.steps * config_.training.gradient_accumulation_steps;
  double total = 0;
  for (std::int64_t i = 0; i < batches; ++i) {
    const Batch b = loader.next(dp_rank_, dp_size_);
    total += model_.forward(b.tokens.data(), b.targets.data(), b.batch, b.seq);
  }
  return global_mean(total / static_cast<double>(batches * dp_size_));
}

void Trainer::log_step(double loss, double grad_norm, double lr, double seconds) {
  const double tokens =
      static_cast<double>(config_.training.batch_size * config_.training.seq_len *
                          config_.training.gradient_accumulation_steps * dp_size_);
  const double tps = tokens / seconds;
  const double mfu = model_.flops_per_token(config_.training.seq_len) * tps /
                     (peak_gflops_ * 1e9 * static_cast<double>(dp_size_));
  std::vector<std::int64_t> memory{peak_memory_bytes()};
  if (world_) world_->all_reduce(memory, dist::ReduceOp::kMax);  // the largest rank's
  metrics_->log_step({state_.step, loss, grad_norm, lr, tps, mfu, seconds, memory[0]});
}

void Trainer::run() { run_until(config_.training.steps); }

void Trainer::run_until(std::int64_t stop) {
  const std::int64_t last = config_.training.steps;
  stop = std::min(stop, last);
  double seconds_per_step = 0;
  while (state_.step < stop) {
    const auto start = Clock::now();
    const double loss = train_step();
    const double max_norm = config_.training.max_norm;
    const double lr = config_.lr_scheduler.at(state_.step);
    double grad_norm = 0;
    if (fsdp_) {
      grad_norm = fsdp_->clip_grad_norm(max_norm);
      fsdp_->step(lr);
    } else {
      grad_norm = max_norm > 0 ? nn::clip_grad_norm(model_.parameters(), max_norm)
                               : nn::grad_norm(model_.parameters());
      optimizer_->step(lr);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    seconds_per_step = seconds_per_step == 0 ? seconds : 0.9 * seconds_per_step + 0.1 * seconds;
    ++state_.step;
    state_.loader_batches = train_loader_.batches_drawn();
    losses_.push_back(loss);
    if (every(state_.step, config_.metrics.log_freq, last)) log_step(loss, grad_norm, lr, seconds);
    if (config_.validation.enable && every(state_.step, config_.validation.freq, last)) {
      last_validation_ = validate();
      metrics_->log_validation(state_.step, *last_validation_);
    }
    if (config_.checkpoint.enable && every(state_.step, config_.checkpoint.interval, last)) save();
    metrics_->progress(state_.step, seconds_per_step);
  }
  metrics_->finish();
  if (fsdp_) log_state_memory(true);
}

}  // namespace weft::train
