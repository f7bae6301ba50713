#include "weft/train/trainer.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string_view>

#include "weft/base/simd.h"
#include "weft/base/system.h"
#include "weft/dist/init.h"
#include "weft/dist/launch_env.h"
#include "weft/kernels/matmul.h"
#include "weft/kernels/parallel.h"
#include "weft/recorder/flight_recorder.h"
#include "weft/train/hf_llama.h"

namespace weft::train {
namespace {

using Clock = std::chrono::steady_clock;

bool every(std::int64_t step, std::int64_t freq, std::int64_t last) {
  return step % freq == 0 || step == last;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) {
    throw ConfigError("parallelism.pipeline_parallel_schedule_csv = '" + path +
                      "' cannot be read (run from the project's root, or give the path)");
  }
  return text.str();
}

std::unique_ptr<data::Tokenizer> run_tokenizer(const Config& c) {
  try {
    return data::load_tokenizer(c.tokenizer.path, c.tokenizer.encoding);
  } catch (const data::TokenizerError& e) {
    throw ConfigError("tokenizer.path = '" + c.tokenizer.path + "': " + e.what());
  }
}

// model.vocab_size 0 is the tokenizer's; a smaller one than the tokenizer's cannot be.
Config with_vocabulary(Config c, const data::Tokenizer& tok) {
  if (c.model.vocab_size == 0) c.model.vocab_size = tok.vocab_size();
  if (c.model.vocab_size < tok.vocab_size()) {
    throw ConfigError("model.vocab_size = " + std::to_string(c.model.vocab_size) +
                      " is smaller than the tokenizer's vocabulary (" + tok.describe() +
                      "): set it to 0 (the tokenizer's) or at least " +
                      std::to_string(tok.vocab_size()));
  }
  return c;
}

// The rows each matrix product takes: 512, or in the layout-invariant mode the largest number
// up to 512 that divides a leaf (a sequence, or a block of one), so that every rank cuts its
// rows alike.
std::int64_t rows_per_product(const TrainingConfig& training) {
  if (training.deterministic != "layout") return 512;
  const std::int64_t leaf =
      training.seq_len / std::max<std::int64_t>(1, training.deterministic_sequence_blocks);
  std::int64_t rows = std::clamp<std::int64_t>(leaf, 1, 512);
  while (leaf % rows != 0) --rows;
  return rows;
}

}  // namespace

Membership membership_from_environment() {
  const auto is = [](const char* name, std::string_view value) {
    const char* v = std::getenv(name);
    return v != nullptr && std::string_view(v) == value;
  };
  return {.replacement = is("WEFT_REPLACEMENT", "1"),
          .in_place = is("WEFT_RECOVER", "in-place") || is("WEFT_RECOVER", "elastic"),
          .elastic = is("WEFT_RECOVER", "elastic")};
}

Trainer::Trainer(Config config, std::ostream& out, Progress progress,
                 std::shared_ptr<dist::ProcessGroup> world, Membership membership)
    : tokenizer_(run_tokenizer(config)),
      config_(with_vocabulary(std::move(config), *tokenizer_)),
      world_(std::move(world)),
      membership_(membership),
      given_out_(out),
      out_(world_ && world_->rank() != 0 ? &null_out_ : &out),
      progress_(progress),
      data_(config_.training.dataset_path, *tokenizer_, config_.training.validation_fraction,
            config_.training.seq_len, config_.model.vocab_size),
      model_(std::in_place, config_.model),
      train_loader_(data_.train(), config_.training.batch_size, config_.training.seq_len,
                    static_cast<std::uint64_t>(config_.training.seed), "train") {
  if (config_.validation.enable && data_.validation().size() <= config_.training.seq_len) {
    throw ConfigError("training.dataset_path = '" + config_.training.dataset_path + "' has " +
                      std::to_string(data_.validation().size()) +
                      " validation tokens, too few for a sequence of training.seq_len = " +
                      std::to_string(config_.training.seq_len) +
                      ": give more (training.validation_fraction, or weft-data tokenize "
                      "--validation-fraction) or set validation.enable = false");
  }
  // weft splits the work between the threads itself; each product runs on one of them.
  nn::set_matmul_dtype(parse_dtype(config_.training.mixed_precision_param));
  kernels::set_product_rows(rows_per_product(config_.training));
  kernels::set_threads(static_cast<int>(config_.training.threads));
  if (const auto launched = dist::launch_environment(); launched && world_) {
    job_rank_ = launched->rank;
    job_size_ = launched->world_size;
  }
  if (membership_.elastic && world_ && !recovers_elastically(config_, membership_)) {
    throw ConfigError(
        "weftrun --recover elastic goes on with fewer ranks in a replicated layout only (DDP "
        "alone, parallelism.auto_machine unset); this job's ranks hold different pieces: use "
        "--recover in-place, which waits for the dead rank's replacement");
  }
  if (world_ && recovers_elastically(config_, membership_)) start_elastic();
  setup_parallelism(membership_.replacement);
  model_->set_activation_checkpointing(config_.training.activation_checkpointing);
  // Each rank initialises only what it holds: the whole model never exists on one rank. A
  // replacement takes its state from the others instead.
  if (!membership_.replacement) {
    parallel_->init_weights(static_cast<std::uint64_t>(config_.training.seed));
  }
  make_checkpointer();
  const bool measured = config_.metrics.peak_gflops <= 0;
  const DType products = nn::matmul_dtype();
  if (membership_.in_place && world_ && !replicated() && config_.checkpoint.buddy_interval > 0) {
    buddies_ = std::make_unique<BuddyCopies>();
  }
  if (membership_.replacement) {
    if (!recovers_in_place()) {
      throw Error(
          "started in place of a dead rank (WEFT_REPLACEMENT=1), but this layout does not "
          "recover in place (docs/RECOVERY.md): weftrun restarts every worker instead");
    }
    // The collectives rejoin() makes on the ranks that stayed, in the same order.
    StateCopy none = buddies_ ? StateCopy{} : state_copy(parallel_->state(), false);
    const std::string from = take_state_on_rejoin(none, 0, false);
    *out_ << "joined the job " << (elastic_ ? "" : "in place of a dead rank ") << "at step "
          << state_.step << " (round " << membership_.round << ", " << world_size_ << " of "
          << job_size_ << " ranks; " << from << ")" << std::endl;
  } else {
    if (config_.checkpoint.resume) resume();
    if (state_.step == 0 && !config_.checkpoint.initial_load_path.empty()) {
      load_initial_weights(config_.checkpoint.initial_load_path);
    }
    parallel_->state().check_replicas_identical();  // what every rank starts from
    peak_gflops_ = measured ? shared_peak_gflops(products) : config_.metrics.peak_gflops;
  }
  char line[256];
  std::snprintf(line, sizeof(line),
                "model: %.2fM parameters, %.1f MFLOP per token; peak %.0f GFLOP/s a rank (%s "
                "%s, oneDNN %s, %lld thread%s); kernels: %s",
                static_cast<double>(model_->whole_numel()) / 1e6,
                model_->flops_per_token(config_.training.seq_len) / 1e6, peak_gflops_,
                std::string(dtype_name(products)).c_str(),
                measured ? "products measured" : "metrics.peak_gflops",
                kernels::matmul_isa(products).c_str(),
                static_cast<long long>(config_.training.threads),
                config_.training.threads == 1 ? "" : "s", simd::current_target().c_str());
  *out_ << line << std::endl;
  log_world();
  log_parallelism(false);
  metrics_ = std::make_unique<MetricsLogger>(*out_, root() ? progress_ : Progress::kNone,
                                             root() ? config_.metrics.jsonl_path : "",
                                             config_.training.steps);
  metrics_->log_config(to_toml(config_));
  // The step the rank it replaces may have died in before logging it (an elastic job's world
  // logged every step without it).
  if (membership_.replacement && !elastic_ && state_.step > 0) log_caught_up_step(true);
}

Trainer::~Trainer() = default;

// [parallelism] as TorchTitan reads it: a replicate degree alone is DDP, a shard degree alone
// FSDP, both HSDP, each composed with tensor parallelism, and pipeline stages over them; the
// mesh is [pp, dp_replicate, dp_shard, tp] (dimensions of size 1 left out), tp varying
// fastest.
parallel::ParallelOptions parallel_options(const Config& config, int world_size) {
  const auto& p = config.parallelism;
  parallel::ParallelOptions options;
  options.dims.pp = static_cast<int>(p.pipeline_parallel_degree);
  options.dims.dp_shard = static_cast<int>(p.data_parallel_shard_degree);
  options.dims.tp = static_cast<int>(p.tensor_parallel_degree);
  options.dims.cp = static_cast<int>(p.context_parallel_degree);
  options.cp_exchange = p.context_parallel_rotate_method == "allgather"
                            ? nn::KeyValueExchange::kAllGather
                            : nn::KeyValueExchange::kRing;
  options.pipeline.schedule = p.pipeline_parallel_schedule;
  options.pipeline.microbatches =
      static_cast<int>(config.training.batch_size / p.pipeline_parallel_microbatch_size);
  options.pipeline.layers_per_stage = static_cast<int>(p.pipeline_parallel_layers_per_stage);
  if (!p.pipeline_parallel_schedule_csv.empty())
    options.pipeline.schedule_csv = read_text(p.pipeline_parallel_schedule_csv);
  const int others = options.dims.pp * options.dims.dp_shard * options.dims.cp * options.dims.tp;
  options.dims.dp_replicate = p.data_parallel_replicate_degree == -1
                                  ? std::max(1, world_size / others)
                                  : static_cast<int>(p.data_parallel_replicate_degree);
  try {
    options.dims.validate(world_size);
  } catch (const InvalidArgument& e) {
    throw ConfigError(e.what());
  }
  options.fsdp_mode = parallel::parse_sharding_mode(p.fsdp_mode);
  options.bucket_bytes = static_cast<std::size_t>(p.bucket_size_mb * (1 << 20));
  options.reduce_dtype = parse_dtype(config.training.mixed_precision_reduce);
  options.param_dtype = parse_dtype(config.training.mixed_precision_param);
  options.sequence_parallel = p.enable_sequence_parallel;
  options.loss_parallel = !p.disable_loss_parallel;
  options.optimizer = config.optimizer;
  options.layout_invariant = config.training.deterministic == "layout";
  options.feature_blocks = static_cast<int>(config.training.deterministic_blocks);
  options.sequence_blocks = static_cast<int>(config.training.deterministic_sequence_blocks);
  return options;
}

int configured_ranks(const Config& config) {
  const ParallelismConfig& p = config.parallelism;
  return static_cast<int>(std::max<std::int64_t>(1, p.data_parallel_replicate_degree) *
                          p.data_parallel_shard_degree * p.tensor_parallel_degree *
                          p.pipeline_parallel_degree * p.context_parallel_degree);
}

estimate::Job estimate_job(const Config& config, const parallel::ParallelOptions& options) {
  return {.model = config.model,
          .options = options,
          .batch = config.training.batch_size,
          .seq = config.training.seq_len,
          .activation_checkpointing = config.training.activation_checkpointing};
}

namespace {

// What the program itself will hold at its peak, measured where it can be: what it holds now,
// before the layout allocates anything (code, libraries, the data's tokens; in a job of several
// processes also more of the libraries' pages and the transport's shared memory), plus what a
// run adds besides its tensors (oneDNN's kernels and working memory, the heap's baseline, the
// threads' stacks), measured once (docs/ESTIMATE.md, "What it counts"). Else `otherwise`.
std::int64_t program_bytes(std::int64_t otherwise) {
  constexpr std::int64_t kRunAddsBytes = std::int64_t{21} << 19;  // 10.5 MiB
  const std::int64_t now = resident_memory_bytes();
  return now > 0 ? now + kRunAddsBytes : otherwise;
}

}  // namespace

Config with_tokenizer_vocabulary(Config config) {
  if (config.model.vocab_size != 0) return config;
  const std::unique_ptr<data::Tokenizer> tokenizer = run_tokenizer(config);  // before the move
  return with_vocabulary(std::move(config), *tokenizer);
}

// The mesh over the world, and the model parallelized on it as parallel_options says.
void Trainer::setup_parallelism(bool rejoining) {
  world_size_ = world_ ? world_->size() : 1;
  // Every group the mesh and the checkpointer make inherits the world's timeout.
  if (world_) world_->set_timeout(Seconds(config_.comm.train_timeout_seconds));
  const parallel::ParallelOptions options = parallel_options(config_, world_size_);
  // Before the layout allocates anything: what this rank will hold at its peak, estimated
  // from the configuration (weft-estimate's figures). The memory available is read now, before
  // any rank's layout takes some (the check's all-reduce waits for every rank's reading).
  available_at_start_ = available_memory_bytes();
  try {
    estimate::Job job = estimate_job(config_, options);
    if (!rejoining) job.program = program_bytes(job.program);
    if (world_) job.p2p_ring_bytes = estimate::p2p_ring_bytes(world_->backend_name());
    const std::vector<estimate::RankMemory> ranks = estimate::estimate_memory(job);
    estimated_ = ranks[static_cast<std::size_t>(world_ ? world_->rank() : 0)];
  } catch (const InvalidArgument& e) {
    throw ConfigError(std::string("parallelism: ") + e.what());
  }
  // Rejoining, the ranks that stayed hold their state already: the host's memory then
  // available says nothing of whether the job fits (it has run).
  if (!rejoining) refuse_what_cannot_fit();
  if (world_) mesh_ = std::make_unique<parallel::DeviceMesh>(world_, options.dims.mesh_dims());
  try {
    parallel_ = parallel::parallelize(*model_, mesh_.get(), options);
  } catch (const InvalidArgument& e) {
    throw ConfigError(std::string("parallelism: ") + e.what());
  }
  dp_rank_ = parallel_->data_rank();
  dp_size_ = parallel_->data_size();
  if (slots_ == 0) {
    slots_ = config_.training.gradient_accumulation_steps * (elastic_ ? job_size_ : dp_size_);
  }
}

void Trainer::make_checkpointer() {
  checkpointer_ = std::make_unique<Checkpointer>(config_, world_, parallel_->state(), mesh_.get(),
                                                 [this](const std::string& line) {
                                                   if (metrics_) {
                                                     metrics_->log_line(line);
                                                   } else {
                                                     *out_ << line << std::endl;
                                                   }
                                                 });
}

// Each rank reads the pieces it holds under this run's layout, whatever layout wrote them.
void Trainer::resume() {
  if (const std::optional<TrainState> resumed = checkpointer_->resume()) {
    state_ = *resumed;
    train_loader_.set_samples_drawn(state_.samples_drawn);
  }
  if (state_.step >= config_.training.steps) {
    *out_ << "nothing to train: the run is at step " << state_.step << " and training.steps is "
          << config_.training.steps << " (raise --training.steps to go on)" << std::endl;
  }
}

bool Trainer::recovers_in_place() const {
  return membership_.in_place && (world_ || elastic_) && config_.parallelism.auto_machine.empty() &&
         (replicated() || config_.checkpoint.buddy_interval > 0);
}

// The survivors of a rank's death keep their state in memory, form the world again with the
// rank weftrun starts in its place (join_process_group's next round), and go on.
void Trainer::recover_or_rethrow(const Error& failure) {
  if (!recovers_in_place()) {
    if (membership_.in_place) {
      std::cerr << "weft-train: this job does not recover in place (a sharded layout with "
                   "checkpoint.buddy_interval 0, or parallelism.auto_machine): weftrun restarts "
                   "every worker instead while --max-restarts allow"
                << std::endl;
    }
    throw;
  }
  const auto began = Clock::now();
  const std::int64_t completed = state_.step;
  const bool was_root = root();
  std::cerr << "weft-train: rank " << world_->rank() << ": " << failure.what()
            << (elastic_ ? "; going on with the others (round "
                         : "; rejoining the others in place (round ")
            << membership_.round + 1 << ")" << std::endl;
  const std::string from = rejoin();
  if (left_job_) return;
  log_world();
  char line[200];
  const double seconds = std::chrono::duration<double>(Clock::now() - began).count();
  if (elastic_) {
    std::snprintf(line, sizeof(line),
                  "recovered elastically in %.2f s (round %d, %d of %d ranks): on from step "
                  "%lld, %s",
                  seconds, membership_.round, world_size_, job_size_,
                  static_cast<long long>(state_.step), from.c_str());
  } else {
    std::snprintf(line, sizeof(line),
                  "recovered in place in %.2f s (round %d): on from step %lld, %s", seconds,
                  membership_.round, static_cast<long long>(state_.step), from.c_str());
  }
  metrics_->log_line(line);
  if (state_.step > completed) {
    log_caught_up_step(true);
  } else if (root() && !was_root && state_.step > 0) {
    log_caught_up_step(false);  // the rank 0 that died may not have logged it
  }
}

// Replicated, the state stays in memory through the rebuilding, and the most advanced rank's
// wins (a survivor may have completed the step the others failed in, never more); sharded,
// the buddy copies hold it, and the model is made again (the layouts cut the model they are
// given).
std::string Trainer::rejoin() {
  if (elastic_) return rejoin_elastic();
  StateCopy copy;
  std::int64_t optimizer_steps = 0;
  if (!buddies_) {
    copy = state_copy(parallel_->state(), true);
    optimizer_steps = parallel_->state().optimizer_steps();
  }
  drop_world();
  if (buddies_) {
    model_.emplace(config_.model);
    model_->set_activation_checkpointing(config_.training.activation_checkpointing);
  }
  const dist::JoinedWorld joined = rejoin_world(config_, membership_.round + 1);
  world_ = joined.world;
  membership_.round = joined.round;
  setup_parallelism(true);
  make_checkpointer();
  return take_state_on_rejoin(copy, optimizer_steps, true);
}

std::string Trainer::take_state_on_rejoin(StateCopy& copy, std::int64_t optimizer_steps,
                                          bool holds_state) {
  if (!buddies_) {
    return "the state of rank " +
           std::to_string(take_state_from_most_advanced(copy, optimizer_steps, holds_state));
  }
  const std::int64_t completed = state_.step;
  apply(buddies_->restore(*world_, parallel_->state()));
  // Back to an earlier step: the steps after it are trained (and their losses kept) again.
  if (holds_state && completed > state_.step) {
    losses_.resize(losses_.size() -
                   static_cast<std::size_t>(std::min<std::int64_t>(
                       completed - state_.step, static_cast<std::int64_t>(losses_.size()))));
  }
  return "the buddy copies";
}

bool Trainer::replicated() const {
  const ParallelismConfig& p = config_.parallelism;
  return p.data_parallel_shard_degree == 1 && p.tensor_parallel_degree == 1 &&
         p.pipeline_parallel_degree == 1 && p.context_parallel_degree == 1;
}

StepStamp Trainer::stamp(std::int64_t optimizer_steps) const {
  return {.train = state_,
          .optimizer_steps = optimizer_steps,
          .peak_gflops = peak_gflops_,
          .loss = last_step_.loss,
          .grad_norm = last_step_.grad_norm,
          .seconds = last_step_.seconds};
}

void Trainer::apply(const StepStamp& stamp) {
  state_ = stamp.train;
  peak_gflops_ = stamp.peak_gflops;
  last_step_ = {.loss = stamp.loss, .grad_norm = stamp.grad_norm, .seconds = stamp.seconds};
  train_loader_.set_samples_drawn(state_.samples_drawn);
}

void Trainer::take_buddy_copies() {
  buddies_->take(*world_, parallel_->state(), stamp(parallel_->state().optimizer_steps()));
  if (buddies_->takes() != 2) return;  // every copy allocated
  char line[200];
  std::snprintf(line, sizeof(line),
                "in-place recovery: %.1f MiB a rank of buddy copies (its state and the previous "
                "rank's, the last two of each), every %lld step%s",
                static_cast<double>(buddies_->bytes()) / (1 << 20),
                static_cast<long long>(config_.checkpoint.buddy_interval),
                config_.checkpoint.buddy_interval == 1 ? "" : "s");
  metrics_->log_line(line);
}

void Trainer::log_caught_up_step(bool trained_elsewhere) {
  if (trained_elsewhere) losses_.push_back(last_step_.loss);
  if (every(state_.step, config_.metrics.log_freq, config_.training.steps)) {
    metrics_->log_step(
        step_metrics(last_step_.loss, last_step_.grad_norm, state_.lr, last_step_.seconds));
  }
}

int Trainer::take_state_from_most_advanced(StateCopy& copy, std::int64_t optimizer_steps,
                                           bool holds_state) {
  std::vector<std::int64_t> mine{holds_state ? state_.step : -1};
  std::vector<std::int64_t> steps(static_cast<std::size_t>(world_->size()));
  world_->all_gather(steps, mine);
  const auto most = std::max_element(steps.begin(), steps.end());  // the first of equals
  if (*most < 0) {
    throw Error("in-place recovery: no rank holds the training state (all " +
                std::to_string(steps.size()) + " were started in place of dead ones)");
  }
  const int source = static_cast<int>(most - steps.begin());
  std::vector<std::int64_t> header = stamp(optimizer_steps).encode();
  world_->broadcast(header, source);
  world_->broadcast(dist::Buffer(copy.block.data<float>(),
                                 static_cast<std::size_t>(copy.block.numel()), DType::kFloat32),
                    source);
  const StepStamp taken = StepStamp::decode(header);
  parallel_->state().load(copy.pieces, taken.optimizer_steps);
  apply(taken);
  parallel_->state().check_replicas_identical();
  return source;
}

void Trainer::save() {
  checkpointer_->save(state_);
  if (config_.checkpoint.async_mode == "async") {
    char line[128];
    std::snprintf(line, sizeof(line),
                  "checkpoint of step %lld staged in %.3f s; writing in the background",
                  static_cast<long long>(state_.step), checkpointer_->last_stall_seconds());
    metrics_->log_line(line);
  }
}

// Before the layout is made and the weights initialised (when most pages are touched): a
// job that does not fit would otherwise grow until the kernel kills a rank, saying nothing.
// Collective, so that every rank gives the same error.
void Trainer::refuse_what_cannot_fit() const {
  // The program itself is running already: the memory available leaves it out.
  const std::int64_t peak = estimated_.total() - estimated_.program;
  const auto launched = dist::launch_environment();
  const std::int64_t here = launched ? launched->local_world_size : world_size_;
  const std::int64_t available = available_at_start_;
  // This rank's shortfall, and each figure for the message (the worst rank's).
  std::vector<std::int64_t> worst{available < 0 ? 0 : here * peak - available,
                                  peak,
                                  estimated_.state(),
                                  estimated_.activations,
                                  peak - estimated_.state() - estimated_.activations,
                                  here,
                                  available};
  if (world_) world_->all_reduce(worst, dist::ReduceOp::kMax);
  if (worst[0] <= 0) return;
  const auto gib = [](std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); };
  char text[800];
  std::snprintf(text, sizeof(text),
                "the model does not fit: a rank holds %.1f GiB at its peak (parameters, "
                "gradients and optimizer state %.1f GiB, activations %.1f, buffers %.1f; %.2fB "
                "parameters in all; weft-estimate shows every rank's), %.1f "
                "GiB for the %lld rank%s on this host, which has %.1f GiB available. Make the "
                "model smaller (model.dim, model.n_layers) or its batch (training.batch_size, "
                "training.seq_len), set training.activation_checkpointing = true, or spread "
                "its state over more ranks and hosts (parallelism.data_parallel_shard_degree, "
                "tensor_parallel_degree, pipeline_parallel_degree)",
                gib(worst[1]), gib(worst[2]), gib(worst[3]), gib(worst[4]),
                static_cast<double>(model_->whole_numel()) / 1e9, gib(worst[1] * worst[5]),
                static_cast<long long>(worst[5]), worst[5] == 1 ? "" : "s", gib(worst[6]));
  throw ConfigError(text);
}

void Trainer::log_parallelism(bool at_end) {
  for (const std::string& line : parallel_->report().describe(at_end)) *out_ << line << std::endl;
  if (!at_end) return;
  const parallel::MemoryReport m = parallel_->report().memory();
  const auto mib = [](std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  char line[256];
  std::snprintf(line, sizeof(line),
                "memory per rank (rank 0): parameters %.1f MiB, gradients %.1f, optimizer %.1f, "
                "activations %.1f (one process: %.1f of parameters, gradients and optimizer)",
                mib(m.parameters), mib(m.gradients), mib(m.optimizer), mib(m.activations),
                mib(m.one_process));
  *out_ << line << std::endl;
  std::snprintf(line, sizeof(line),
                "memory per rank (rank 0), estimated before the run: %.1f MiB at the peak "
                "(state %.1f, activations %.1f, scratch %.1f, working %.1f, program %.1f); peak "
                "resident %.1f MiB",
                mib(estimated_.total()), mib(estimated_.state()), mib(estimated_.activations),
                mib(estimated_.scratch), mib(estimated_.working), mib(estimated_.program),
                mib(peak_resident_memory_bytes()));
  *out_ << line << std::endl;
  if (m.canonical_sums > 0) {
    std::snprintf(line, sizeof(line),
                  "memory per rank (rank 0): %.1f MiB more for the layout-invariant sums (partial "
                  "sums per block of sequences and exchange buffers, kept for reuse)",
                  mib(m.canonical_sums));
    *out_ << line << std::endl;
  }
  if (!world_ || step_seconds_ == 0) return;
  std::snprintf(line, sizeof(line),
                "communication (rank 0): %.1f%% of the training steps' time blocked in "
                "collectives (%.2f of %.2f s)",
                100 * step_communication_ / step_seconds_, step_communication_, step_seconds_);
  *out_ << line << std::endl;
}

// The global batch is slots_ micro-batches (slots) in the loader's order; data rank r trains
// slots r, r + ranks, ...: micro-batches per rank as configured, and more while an elastic job
// runs with fewer ranks (some then one more than others). Each rank's loss is its share of the
// global mean (local mean / slots), so the gradients DDP sums are those of the global mean.
double Trainer::train_step() {
  parallel_->zero_grad();
  const double share = 1.0 / static_cast<double>(slots_);
  double loss = 0;
  for (std::int64_t slot = dp_rank_; slot < slots_; slot += dp_size_) {
    const Batch b = train_loader_.at(slot);
    // Only the last micro-batch's backward reduces (FSDP's zero2 and full_shard reduce each).
    if (slot + dp_size_ >= slots_) parallel_->prepare_sync();
    loss += parallel_->forward_backward(b.tokens.data(), b.targets.data(), b.batch, b.seq, share) *
            share;
  }
  train_loader_.skip(slots_);
  parallel_->finish_sync();
  return parallel_->step_loss(loss);
}

void Trainer::load_initial_weights(const std::string& folder) {
  const std::vector<parallel::StatePiece> layout = parallel_->state().layout();
  std::vector<Tensor> values;
  parallel_->state().copy(values);
  std::multimap<std::string, std::size_t> pieces;  // "model.<parameter>" -> its pieces here
  for (std::size_t i = 0; i < layout.size(); ++i) pieces.emplace(layout[i].name, i);
  std::int64_t tensors = 0;
  read_hf_model(folder, config_.model, [&](const std::string& name, const Tensor& whole) {
    ++tensors;
    const auto [first, last] = pieces.equal_range("model." + name);
    for (auto it = first; it != last; ++it) {
      const parallel::StatePiece& p = layout[it->second];
      Tensor box = whole;
      for (std::size_t d = 0; d < p.sizes.size(); ++d) {
        box = box.narrow(static_cast<int>(d), p.offsets[d], p.sizes[d]);
      }
      values[it->second].copy_from(box.contiguous());
    }
  });
  parallel_->state().load(values, 0);
  // Before the metrics logger exists (as the resume's lines).
  *out_ << "loaded the initial weights from " << folder << " (Hugging Face layout, " << tensors
        << " tensors)" << std::endl;
}

double Trainer::validate() {
  DataLoader loader(data_.validation(), config_.training.batch_size, config_.training.seq_len,
                    static_cast<std::uint64_t>(config_.training.seed), "validation");
  // validation.steps global batches, split as training splits them: the validation loss
  // does not depend on how many ranks share them.
  const std::int64_t slots = config_.validation.steps * slots_;
  double total = 0;
  for (std::int64_t slot = dp_rank_; slot < slots; slot += dp_size_) {
    const Batch b = loader.at(slot);
    total += parallel_->evaluate(b.tokens.data(), b.targets.data(), b.batch, b.seq);
  }
  return parallel_->sum_over_data(total / static_cast<double>(slots));
}

// Measured by rank 0 alone, the others waiting: ranks measuring at once on shared cores would
// each see a fraction of the peak, and mfu would pass 100%.
double Trainer::shared_peak_gflops(DType products) const {
  std::vector<double> peak{root() ? measure_peak_gflops(products) : 0.0};
  if (world_) world_->broadcast(peak, 0);
  return peak[0];
}

// This host's ranks and the CPUs they may run on between them: each rank's affinity mask
// (taskset, weftrun --bind-to core), gathered with its host's name and joined per host.
std::pair<std::int64_t, std::int64_t> Trainer::host_ranks_and_cores() const {
  constexpr std::size_t kWords = 16;  // CPUs 0-1023
  std::vector<std::int64_t> mine(kWords + 1, 0);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  mine[0] = static_cast<std::int64_t>(std::hash<std::string_view>{}(host));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return {1, 1};
  for (int cpu = 0; cpu < static_cast<int>(64 * kWords) && cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) mine[1 + cpu / 64] |= std::int64_t{1} << (cpu % 64);
  }
  std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(world_size_));
  if (world_) {
    world_->all_gather(all, mine);
  } else {
    all = mine;
  }
  std::int64_t ranks = 0;
  std::vector<std::int64_t> joined(kWords, 0);
  for (std::size_t r = 0; r < all.size(); r += mine.size()) {
    if (all[r] != mine[0]) continue;
    ++ranks;
    for (std::size_t w = 0; w < kWords; ++w) joined[w] |= all[r + 1 + w];
  }
  std::int64_t cores = 0;
  for (const std::int64_t w : joined) cores += std::popcount(static_cast<std::uint64_t>(w));
  return {ranks, std::max<std::int64_t>(cores, 1)};
}

// The ranks, the backend, and the share of a core each rank has: mfu is measured against
// the cores the ranks actually have (fewer than ranks x threads when they oversubscribe).
void Trainer::log_world() {
  const auto [here, cores] = host_ranks_and_cores();
  const std::int64_t wanted = here * config_.training.threads;
  core_share_ = wanted > cores ? static_cast<double>(cores) / static_cast<double>(wanted) : 1.0;
  std::string line = "world: " + std::to_string(world_size_) + " rank" +
                     (world_size_ == 1 ? "" : "s") +
                     (world_ ? ", backend " + std::string(world_->backend_name()) : "");
  if (core_share_ < 1.0) {
    const std::int64_t threads = config_.training.threads;
    line += "; " + std::to_string(here) + " ranks x " + std::to_string(threads) +
            (threads == 1 ? " thread" : " threads") + " share this host's " +
            std::to_string(cores) + (cores == 1 ? " core" : " cores") +
            ": mfu is against the cores, not ranks x peak";
  }
  *out_ << line << std::endl;
}

StepMetrics Trainer::step_metrics(double loss, double grad_norm, double lr, double seconds) const {
  const double tokens =
      static_cast<double>(config_.training.batch_size * config_.training.seq_len * slots_);
  const double tps = tokens / seconds;
  const double mfu = model_->flops_per_token(config_.training.seq_len) * tps /
                     (peak_gflops_ * 1e9 * static_cast<double>(world_size_) * core_share_);
  return {state_.step, loss, grad_norm, lr, tps, mfu, seconds, peak_resident_memory_bytes()};
}

void Trainer::log_step(double loss, double grad_norm, double lr, double seconds, double blocked) {
  StepMetrics m = step_metrics(loss, grad_norm, lr, seconds);
  if (world_ && world_->size() > 1) {
    std::vector<std::int64_t> mine{m.memory_bytes};
    m.rank_memory_bytes.resize(static_cast<std::size_t>(world_->size()));
    world_->all_gather(m.rank_memory_bytes, mine);
    m.memory_bytes = *std::max_element(m.rank_memory_bytes.begin(), m.rank_memory_bytes.end());
    m.communication_share = seconds > 0 ? blocked / seconds : 0;
  }
  metrics_->log_step(m);
}

// The ranks' seconds blocked in communication since the last logged step, gathered (one small
// all-gather), name the rank the others keep waiting for. Only where every rank does the same
// work: a pipeline's stages wait for each other by design.
void Trainer::watch_stragglers() {
  std::vector<double> mine{window_communication_};
  const double seconds = window_seconds_;
  const std::int64_t first = window_first_step_;
  window_communication_ = window_seconds_ = 0;
  window_first_step_ = state_.step + 1;
  // Nor while the ranks train unequal shares (an elastic job with fewer ranks).
  if (!world_ || world_->size() < 2 || config_.parallelism.pipeline_parallel_degree > 1 ||
      slots_ % dp_size_ != 0) {
    return;
  }
  std::vector<double> waits(static_cast<std::size_t>(world_->size()));
  world_->all_gather(waits, mine);
  const auto report = stragglers_.observe(waits, seconds, first, state_.step);
  if (report && root()) metrics_->log_line(*report);
}

void Trainer::skip_or_stop(double loss, double grad_norm) const {
  char what[160];
  std::snprintf(what, sizeof(what), "step %lld: loss %g, gradient norm %g",
                static_cast<long long>(state_.step + 1), loss, grad_norm);
  if (config_.training.on_nonfinite == "skip") {
    metrics_->log_line(std::string(what) + ": not finite; the optimizer step is skipped");
    return;
  }
  throw NonFiniteError(std::string(what) +
                       ": not finite, so training stopped before the optimizer step and saved "
                       "nothing (the newest checkpoint is the last good state). Resume from it "
                       "with a lower optimizer.lr or training.max_norm, or set "
                       "training.on_nonfinite = \"skip\"");
}

void Trainer::train_logged_step(std::int64_t last, double& seconds_per_step) {
  // The flight recorder labels this step's collectives "step N" (weftrun names it when a
  // rank stops the job).
  const recorder::FlightRecorder::Site site("step " + std::to_string(state_.step + 1));
  const auto start = Clock::now();
  const double communication = parallel_->report().communication_seconds();
  const double loss = train_step();
  const double max_norm = config_.training.max_norm;
  const double lr = config_.lr_scheduler.at(state_.step);
  const double grad_norm = parallel_->clip_grad_norm(max_norm);
  // The loss and the norm are the same on every rank (summed over the world), so every
  // rank decides alike.
  const bool finite = std::isfinite(loss) && std::isfinite(grad_norm);
  if (finite) {
    parallel_->step(lr);
  } else {
    skip_or_stop(loss, grad_norm);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double blocked = parallel_->report().communication_seconds() - communication;
  step_seconds_ += seconds;
  step_communication_ += blocked;
  window_seconds_ += seconds;
  window_communication_ += blocked;
  seconds_per_step = seconds_per_step == 0 ? seconds : 0.9 * seconds_per_step + 0.1 * seconds;
  ++state_.step;
  state_.samples_drawn = train_loader_.samples_drawn();
  state_.lr = lr;
  losses_.push_back(loss);
  last_step_ = {.loss = loss, .grad_norm = grad_norm, .seconds = seconds};
  if (every(state_.step, config_.metrics.log_freq, last)) {
    log_step(loss, grad_norm, lr, seconds, blocked);
    watch_stragglers();
  }
  // After the step's line: a recovery that goes on from this step finds it logged.
  if (buddies_ && state_.step % config_.checkpoint.buddy_interval == 0) take_buddy_copies();
  if (config_.validation.enable && every(state_.step, config_.validation.freq, last)) {
    last_validation_ = validate();
    metrics_->log_validation(state_.step, *last_validation_, data_.validation().bytes_per_token());
    if (!best_validation_ || *last_validation_ < best_validation_->first) {
      best_validation_ = {*last_validation_, state_.step};
    }
  }
  checkpointer_->poll();  // a background save's outcome, once it is known everywhere
  if (config_.checkpoint.enable && every(state_.step, config_.checkpoint.interval, last)) save();
  metrics_->progress(state_.step, seconds_per_step, loss);
}

void Trainer::run() { run_until(config_.training.steps); }

void Trainer::run_until(std::int64_t stop) {
  const std::int64_t last = config_.training.steps;
  stop = std::min(stop, last);
  double seconds_per_step = 0;
  const std::int64_t first = state_.step + 1;
  const auto began = Clock::now();
  const double steps_seconds = step_seconds_, steps_communication = step_communication_;
  window_first_step_ = state_.step + 1;  // a resumed run's first window
  while (state_.step < stop && !left_job_) {
    try {
      train_logged_step(last, seconds_per_step);
      if (elastic_ && world_size_ < job_size_ && state_.step < last) admit_joiners();
    } catch (const dist::PeerError& e) {
      recover_or_rethrow(e);
    } catch (const dist::GroupBroken& e) {
      recover_or_rethrow(e);
    }
  }
  if (left_job_) {
    std::cerr << "weft-train: rank " << job_rank_
              << " was left out of the job, which finished without it" << std::endl;
    return;
  }
  if (elastic_ && root() && state_.step >= last) elastic_->finish();
  checkpointer_->finish();
  metrics_->finish();
  log_parallelism(true);
  const std::string timeline = parallel_->report().pipeline_timeline_svg();  // collective
  if (!timeline.empty()) metrics_->log_pipeline_timeline(timeline);
  if (state_.step >= first) {
    summarize(first, std::chrono::duration<double>(Clock::now() - began).count(),
              step_seconds_ - steps_seconds, step_communication_ - steps_communication);
  }
}

// Collective (the peak memory is the largest rank's).
void Trainer::summarize(std::int64_t first, double wall_seconds, double steps_seconds,
                        double communication_seconds) {
  std::vector<std::int64_t> memory{peak_resident_memory_bytes()};
  if (world_) world_->all_reduce(memory, dist::ReduceOp::kMax);
  const double tokens = static_cast<double>(config_.training.batch_size * config_.training.seq_len *
                                            slots_ * (state_.step - first + 1));
  RunSummary s{.first_step = first,
               .last_step = state_.step,
               .wall_seconds = wall_seconds,
               .tokens_per_second = steps_seconds > 0 ? tokens / steps_seconds : 0,
               .final_loss = losses_.back(),
               .peak_memory_bytes = memory[0]};
  if (best_validation_) {
    s.best_validation = best_validation_->first;
    s.best_validation_step = best_validation_->second;
  }
  if (world_ && steps_seconds > 0) s.communication_share = communication_seconds / steps_seconds;
  metrics_->log_summary(s);
}

}  // namespace weft::train
