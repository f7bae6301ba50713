// The training loop of weft-train: Llama on a tokenized dataset (docs/DATA.md), AdamW with
// clipping, gradient accumulation and the learning-rate schedule, validation, metrics, checkpoints
// and resumption; under weftrun (WORLD_SIZE > 1) parallel over the job's ranks as [parallelism]
// says: tensor parallelism, and DDP, FSDP (ZeRO-1/2/3) or HSDP, composed on one device mesh
// by parallel::parallelize (docs/PARALLELISM.md). The constructor checks everything it can
// (configuration, data file, checkpoint to resume) before anything is written.
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <vector>

#include "weft/data/tokenizer.h"
#include "weft/dist/elastic.h"
#include "weft/dist/init.h"
#include "weft/dist/process_group.h"
#include "weft/estimate/memory_estimate.h"
#include "weft/nn/llama.h"
#include "weft/nn/optim.h"
#include "weft/parallel/device_mesh.h"
#include "weft/parallel/parallelize.h"
#include "weft/train/checkpointer.h"
#include "weft/train/config.h"
#include "weft/train/data.h"
#include "weft/train/metrics.h"
#include "weft/train/recovery_state.h"
#include "weft/train/straggler.h"

namespace weft::train {

// What parallel::parallelize gets from `config` ([parallelism], and the optimizer) for a job
// of `world_size` ranks; ConfigError when the degrees do not fit it.
parallel::ParallelOptions parallel_options(const Config& config, int world_size);
// The ranks the configured degrees make, data_parallel_replicate_degree -1 counting as 1.
int configured_ranks(const Config& config);
// The job estimate::estimate_memory sees in `config` laid out as `options` (parallel_options'
// for the job's rank count; give it a config whose model.vocab_size is resolved:
// with_tokenizer_vocabulary).
estimate::Job estimate_job(const Config& config, const parallel::ParallelOptions& options);
// `config` with model.vocab_size 0 made its tokenizer's (loaded from tokenizer.path), as the
// trainer trains it; ConfigError when the tokenizer cannot be read or has more tokens than a
// vocab_size 0 leaves room for. A vocab_size set is kept as it is, unchecked.
Config with_tokenizer_vocabulary(Config config);

// Where this process stands in its job, for recovery without a restart (docs/RECOVERY.md).
struct Membership {
  int round = 0;             // the rendezvous round its world was formed in
  bool replacement = false;  // started in place of a dead rank: it takes the training state
                             // from the others instead of initialising or resuming it
  bool in_place = false;     // when a rank dies, rejoin the others (where the layout allows)
  bool elastic = false;      // and a replicated layout goes on without it until it is back
  std::optional<dist::ElasticRound> admitted;  // elastic: the round a new process joined
};

// What weftrun --recover in-place or elastic says to this process (WEFT_RECOVER,
// WEFT_REPLACEMENT).
Membership membership_from_environment();

// Whether `config` trained with `membership` goes on with fewer ranks when one dies: elastic,
// and a replicated layout (DDP) on a fixed mesh (the Trainer refuses elastic for other layouts).
bool recovers_elastically(const Config& config, const Membership& membership);

// The job's world formed again after a rank died, from `round` on (the next one, or
// dist::InitOptions::kFirstFreeRound for a replacement): a round whose ranks have not all
// arrived within comm.rejoin_timeout_seconds (one died meanwhile) is left for the next, three
// at most; then the TimeoutError.
dist::JoinedWorld rejoin_world(const Config& config, int round);

class Trainer {
 public:
  // `out` gets the step lines (and the progress, as `progress` says), on rank 0 only.
  // `world`: the job's process group for data parallelism, or null for one process, formed in
  // membership.round. With membership.in_place a rank's death is survived: the others form the
  // world again with its replacement (weftrun starts one) and go on, in a replicated layout
  // (DDP) from the step the most advanced rank completed, in the others from the newest step
  // every rank's state survives at in memory (checkpoint.buddy_interval > 0); without copies,
  // or with parallelism.auto_machine, the error ends the run (weftrun restarts every worker).
  // With membership.elastic a replicated layout goes on without the dead rank and takes its
  // replacement back at a step boundary, the global batch the same (recovers_elastically).
  Trainer(Config config, std::ostream& out, Progress progress = Progress::kNone,
          std::shared_ptr<dist::ProcessGroup> world = nullptr, Membership membership = {});
  ~Trainer();
  // Trains from the current step to training.steps.
  void run();
  // Trains until `step` steps are done (at most training.steps), as if interrupted there.
  void run_until(std::int64_t step);

  // The loss of every step this run trained (not those before a resume).
  const std::vector<double>& losses() const { return losses_; }
  std::optional<double> last_validation_loss() const { return last_validation_; }
  // The model: this rank's tensor-parallel slices; under FSDP its parameters are the
  // sharding's working memory (fsdp.h).
  nn::Llama& model() { return *model_; }
  std::int64_t step() const { return state_.step; }

 private:
  // One step of run_until's loop: trains, logs, validates and saves as configured.
  void train_logged_step(std::int64_t last, double& seconds_per_step);
  double train_step();
  double validate();
  // `rejoining`: the world is formed again (in-place recovery), for a job known to fit.
  void setup_parallelism(bool rejoining);
  void make_checkpointer();
  bool replicated() const;  // DDP alone: every rank holds the whole state
  bool recovers_in_place() const;
  // The trainer's position after the last step; `optimizer_steps`: the state's.
  StepStamp stamp(std::int64_t optimizer_steps) const;
  void apply(const StepStamp& stamp);  // the position taken from another rank's copy
  // Collective over a world formed again, on the ranks that stayed (`holds_state`, `copy`
  // their state when replicated) and on a replacement alike: the state from the most
  // advanced rank (replicated) or from the buddy copies (sharded); says whence.
  std::string take_state_on_rejoin(StateCopy& copy, std::int64_t optimizer_steps, bool holds_state);
  void take_buddy_copies();  // collective
  // In a catch block for a peer's failure: rejoins the others (recovers_in_place), else
  // rethrows the failure.
  void recover_or_rethrow(const Error& failure);
  // The world formed again and every rank's state restored; says whence (empty: this process
  // was left out of an elastic job that then finished).
  std::string rejoin();
  // Elastic: the survivors' world formed again without the dead, a late survivor admitted
  // again; every rank then holds the most advanced rank's state.
  std::string rejoin_elastic();
  // Elastic, at a step boundary while the world is smaller than the job: rank 0 admits the
  // processes waiting to join, and the world grows to take them in. Collective.
  void admit_joiners();
  // Elastic, this process holding its state (held_) and no world: forms `next` (or asks to
  // join when it is not a member) and takes the most advanced rank's state; a round that
  // fails (a death while it forms) is left for the next one the survivors form, three at
  // most. Says whence the state came; empty when this process was left out of a job that
  // finished meanwhile.
  std::string change_world(std::optional<dist::ElasticRound> next);
  void start_elastic();  // elastic_ and round_, from membership_
  void hold_state();     // held_: this rank's state, kept until a world takes it
  void enter(const dist::ElasticRound& round);  // forms its world and lays the model out on it
  void drop_world();                            // everything that holds the world, then the world
  // Who logs: rank 0 of the world now (elastic rounds renumber the ranks).
  void follow_rank_zero();
  // Collective over a world formed again: every rank takes the state of the rank that
  // completed the most steps (weights, optimizer state, data position, learning rate); returns
  // that rank. `copy`: this rank's (state_copy), overwritten; `holds_state`: false on a
  // replacement, which has none to offer.
  int take_state_from_most_advanced(StateCopy& copy, std::int64_t optimizer_steps,
                                    bool holds_state);
  // ConfigError (every rank) when what the ranks on one host will hold at their peak
  // (estimated_) exceeds its memory.
  void refuse_what_cannot_fit() const;
  void resume();
  // checkpoint.initial_load_path's weights into this rank's pieces (a fresh run only).
  void load_initial_weights(const std::string& folder);
  void save();
  // A step with a non-finite loss or gradient norm: logs and returns (skip) or throws.
  void skip_or_stop(double loss, double grad_norm) const;
  void log_parallelism(bool at_end);  // the strategies and what each rank holds
  double shared_peak_gflops(DType products) const;
  std::pair<std::int64_t, std::int64_t> host_ranks_and_cores() const;
  void log_world();  // the ranks, the backend, and whether they oversubscribe the cores
  void summarize(std::int64_t first, double wall_seconds, double steps_seconds,
                 double communication_seconds);
  StepMetrics step_metrics(double loss, double grad_norm, double lr, double seconds) const;
  void log_step(double loss, double grad_norm, double lr, double seconds, double blocked);
  // The last step's line in rank 0's log, which would skip it otherwise: after taking the state
  // of a rank that completed a step this one did not (`trained_elsewhere`: its loss goes to
  // losses() too), or on becoming rank 0 in place of one that died.
  void log_caught_up_step(bool trained_elsewhere);
  void watch_stragglers();  // collective: at every logged step
  bool root() const { return !world_ || world_->rank() == 0; }

  std::unique_ptr<data::Tokenizer> tokenizer_;  // before config_: it sets model.vocab_size
  Config config_;
  std::shared_ptr<dist::ProcessGroup> world_;
  Membership membership_;
  int dp_rank_ = 0, dp_size_ = 1, world_size_ = 1;
  // The global batch's micro-batches of training.batch_size (slots): gradient accumulation
  // steps x the configured data-parallel ranks, whatever number of ranks share them.
  std::int64_t slots_ = 0;
  int job_rank_ = 0, job_size_ = 1;                   // RANK and WORLD_SIZE as launched
  std::unique_ptr<dist::ElasticMembership> elastic_;  // recovers_elastically
  dist::ElasticRound round_;                          // elastic: the world's members
  bool left_job_ = false;  // elastic: left out of a job that finished meanwhile
  struct HeldState {
    StateCopy copy;
    std::int64_t optimizer_steps = 0;
  };
  std::optional<HeldState> held_;  // elastic: through a change of world
  std::ostream null_out_{nullptr};
  std::ostream& given_out_;
  std::ostream* out_;  // given_out_ on rank 0, else null_out_
  Progress progress_;
  Dataset data_;
  std::optional<nn::Llama> model_;  // made again when a sharded layout recovers in place
  DataLoader train_loader_;
  TrainState state_;
  double peak_gflops_ = 0;  // one rank's, with its threads, measured alone
  double core_share_ = 1;   // each rank's share of the cores its threads want (below 1: fewer)
  std::int64_t available_at_start_ = -1;  // the host's memory before the layout took any
  estimate::RankMemory estimated_;        // this rank's, from the configuration
  std::unique_ptr<MetricsLogger> metrics_;
  std::unique_ptr<parallel::DeviceMesh> mesh_;  // over the world; null for one process
  std::unique_ptr<parallel::ParallelModel> parallel_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<BuddyCopies> buddies_;  // sharded layouts under weftrun --recover in-place
  std::vector<double> losses_;
  struct {
    double loss = 0, grad_norm = 0, seconds = 0;
  } last_step_;                                       // the last step completed
  double step_seconds_ = 0, step_communication_ = 0;  // this run's training steps
  // Since the last logged step: for StragglerWatch.
  double window_seconds_ = 0, window_communication_ = 0;
  std::int64_t window_first_step_ = 1;
  StragglerWatch stragglers_;
  std::optional<double> last_validation_;
  std::optional<std::pair<double, std::int64_t>> best_validation_;  // loss, step
};

// A process started in place of a dead one in an elastic job (recovers_elastically): waits
// until the job's rank 0 admits it at a step boundary, joins that round's world and takes the
// state from the others (Trainer's constructor); a round that fails meanwhile (a death) and it
// meets the others in the next, three times at most. nullptr when the job finished first.
std::unique_ptr<Trainer> join_elastic_job(const Config& config, std::ostream& out,
                                          Progress progress, Membership membership);

}  // namespace weft::train
