// The elastic part of the Trainer (weftrun --recover elastic, docs/RECOVERY.md): a replicated
// job goes on with the ranks that survive a death, and grows back when its replacement has
// started, the global batch the same throughout (train_step's slots).
#include <algorithm>
#include <iostream>

#include "weft/dist/launch_env.h"
#include "weft/train/trainer.h"

namespace weft::train {
namespace {

constexpr int kTries = 3;  // rounds a process tries to form before the error ends it

dist::InitOptions round_options(const Config& config) {
  return {.timeout = Seconds(config.comm.rejoin_timeout_seconds)};
}

}  // namespace

bool recovers_elastically(const Config& config, const Membership& membership) {
  const ParallelismConfig& p = config.parallelism;
  return membership.elastic && p.auto_machine.empty() && p.data_parallel_shard_degree == 1 &&
         p.tensor_parallel_degree == 1 && p.pipeline_parallel_degree == 1 &&
         p.context_parallel_degree == 1;
}

std::optional<dist::JoinedWorld> join_elastic_job(const Config& config, Membership& membership) {
  const auto launched = dist::launch_environment();
  if (!launched) throw Error("an elastic job's process must be started by weftrun");
  const Seconds timeout(config.comm.rejoin_timeout_seconds);
  dist::ElasticMembership elastic(dist::connect_job_store(timeout), launched->rank,
                                  launched->world_size, timeout);
  for (int tried = 1;; ++tried) {
    const std::optional<dist::ElasticRound> round = elastic.join();
    if (!round) return std::nullopt;
    try {
      dist::JoinedWorld joined = elastic.form(*round, round_options(config));
      membership.round = round->round;
      membership.members = round->members;
      return joined;
    } catch (const TimeoutError& e) {  // a member died before the round formed
      if (tried == kTries) throw;
      std::cerr << "weft-train: " << e.what() << "; asking to join again" << std::endl;
    } catch (const dist::PeerError& e) {
      if (tried == kTries) throw;
      std::cerr << "weft-train: " << e.what() << "; asking to join again" << std::endl;
    }
  }
}

// Everything that holds the world goes before it.
void Trainer::drop_world() {
  checkpointer_.reset();
  parallel_.reset();
  mesh_.reset();
  world_.reset();
}

void Trainer::enter(const dist::ElasticRound& round) {
  world_ = elastic_->form(round, round_options(config_)).world;
  round_ = round;
  membership_.round = round.round;
  setup_parallelism(true);
  make_checkpointer();
  follow_rank_zero();
}

void Trainer::follow_rank_zero() {
  std::ostream* now = root() ? &given_out_ : &null_out_;
  if (now == out_) return;
  out_ = now;
  metrics_ = std::make_unique<MetricsLogger>(*out_, root() ? progress_ : Progress::kNone,
                                             root() ? config_.metrics.jsonl_path : "",
                                             config_.training.steps);
}

// The survivors meet in the next round (those that arrive within a step's time of the first:
// a survivor busy in its forward meets the failure at its next collective); one that arrives
// later, or a round that cannot form (another death), asks to join as a new process would.
std::string Trainer::rejoin_elastic() {
  StateCopy copy = state_copy(parallel_->state(), true);
  const std::int64_t optimizer_steps = parallel_->state().optimizer_steps();
  drop_world();
  const Seconds settle(
      std::clamp(1.5 * last_step_.seconds + 0.1, 0.2, config_.comm.rejoin_timeout_seconds / 2));
  std::optional<dist::ElasticRound> next = elastic_->after_failure(round_, settle);
  for (int tried = 1;; ++tried) {
    if (next->rank_of(job_rank_) < 0) {
      std::cerr << "weft-train: rank " << job_rank_ << " came after round " << next->round
                << " formed; asking to join it" << std::endl;
      next = elastic_->join();
      if (!next) {
        left_job_ = true;
        return {};
      }
    }
    try {
      enter(*next);
      break;
    } catch (const TimeoutError& e) {
      if (tried == kTries) throw;
      std::cerr << "weft-train: " << e.what() << "; trying the next round" << std::endl;
    } catch (const dist::PeerError& e) {
      if (tried == kTries) throw;
      std::cerr << "weft-train: " << e.what() << "; trying the next round" << std::endl;
    }
    drop_world();
    next = elastic_->after_failure(*next, settle);
  }
  return "the state of rank " +
         std::to_string(take_state_from_most_advanced(copy, optimizer_steps, true));
}

void Trainer::admit_joiners() {
  std::vector<std::int64_t> decision(static_cast<std::size_t>(job_size_) + 1, -1);
  if (root()) {
    if (const std::optional<dist::ElasticRound> next = elastic_->admit(round_)) {
      decision[0] = next->round;
      std::copy(next->members.begin(), next->members.end(), decision.begin() + 1);
    }
  }
  world_->broadcast(decision, 0);
  if (decision[0] < 0) return;
  dist::ElasticRound next{static_cast<int>(decision[0]), {}};
  for (std::size_t i = 1; i < decision.size() && decision[i] >= 0; ++i) {
    next.members.push_back(static_cast<int>(decision[i]));
  }
  // Before the world changes: rank 0 may become another (the new ranks log their joining).
  char line[160];
  std::snprintf(line, sizeof(line), "growing from %d to %zu of %d ranks after step %lld (round %d)",
                world_size_, next.members.size(), job_size_, static_cast<long long>(state_.step),
                next.round);
  metrics_->log_line(line);
  checkpointer_->finish();  // a save in the background completes in the world that began it
  StateCopy copy = state_copy(parallel_->state(), true);
  const std::int64_t optimizer_steps = parallel_->state().optimizer_steps();
  drop_world();
  enter(next);
  take_state_from_most_advanced(copy, optimizer_steps, true);
  log_world();
}

}  // namespace weft::train
