// How a Trainer's process meets the others again after a death (docs/RECOVERY.md): the rounds
// of in-place recovery, and the elastic job (weftrun --recover elastic), which goes on with the
// ranks that survive and grows back when its replacement has started, the global batch the
// same throughout (train_step's slots).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "weft/dist/errors.h"
#include "weft/dist/launch_env.h"
#include "weft/train/trainer.h"

namespace weft::train {
namespace {

constexpr int kTries = 3;  // rounds a process tries to form before the error ends the run

dist::InitOptions round_options(const Config& config) {
  return {.timeout = Seconds(config.comm.rejoin_timeout_seconds)};
}

// How long a new process waits to be admitted: the others admit it after their step (bounded
// by comm.train_timeout_seconds) and after forming the job again.
Seconds admission_wait(const Config& config) {
  return Seconds(config.comm.train_timeout_seconds + config.comm.rejoin_timeout_seconds);
}

// The wait for the other survivors of a failure. They meet it at the same collective, the
// step's gradient reduction, each as late as it is behind the others (a rank ahead waits
// there for the slower ones every step): half a step and a little, at least the shm
// backend's 0.1 s between looks at its peers twice. One later still joins at the next step.
Seconds settle_window(const Config& config, double step_seconds) {
  return Seconds(std::clamp(0.5 * step_seconds + 0.1, 0.2, config.comm.rejoin_timeout_seconds / 2));
}

// `attempt` forms a round; when it fails as a round can (a TimeoutError: a member never came;
// a PeerError or GroupBroken: one died), `next` prepares another, kTries in all; then the
// failure ends the run (a weft::Error, which the training loop does not take for a death).
template <class Attempt, class Next>
auto in_rounds(Attempt attempt, Next next) -> decltype(attempt()) {
  for (int tried = 1;; ++tried) {
    std::string failure;
    try {
      return attempt();
    } catch (const TimeoutError& e) {
      failure = e.what();
    } catch (const dist::PeerError& e) {
      failure = e.what();
    } catch (const dist::GroupBroken& e) {
      failure = e.what();
    }
    if (tried == kTries) {
      throw Error("no round of the job formed in " + std::to_string(kTries) +
                  " tries (comm.rejoin_timeout_seconds each); the last: " + failure);
    }
    std::cerr << "weft-train: " << failure << "; " << next() << std::endl;
  }
}

}  // namespace

dist::JoinedWorld rejoin_world(const Config& config, int round) {
  return in_rounds(
      [&] {
        dist::InitOptions options = round_options(config);
        options.round = round;
        return dist::join_process_group(options);
      },
      [&] {
        if (round != dist::InitOptions::kFirstFreeRound) ++round;
        return "trying the next round";
      });
}

bool recovers_elastically(const Config& config, const Membership& membership) {
  const ParallelismConfig& p = config.parallelism;
  return membership.elastic && p.auto_machine.empty() && p.data_parallel_shard_degree == 1 &&
         p.tensor_parallel_degree == 1 && p.pipeline_parallel_degree == 1 &&
         p.context_parallel_degree == 1;
}

std::unique_ptr<Trainer> join_elastic_job(const Config& config, std::ostream& out,
                                          Progress progress, Membership membership) {
  const auto launched = dist::launch_environment();
  if (!launched) throw Error("an elastic job's new process must be started by weftrun");
  dist::ElasticMembership elastic(
      dist::connect_job_store(Seconds(config.comm.rejoin_timeout_seconds)), launched->rank,
      launched->world_size, admission_wait(config));
  std::optional<dist::ElasticRound> round = elastic.join();
  return in_rounds(
      [&]() -> std::unique_ptr<Trainer> {
        if (!round) return nullptr;
        if (round->rank_of(launched->rank) < 0) {
          throw Error("rank " + std::to_string(launched->rank) +
                      " was admitted to the job, which holds a process of that rank already");
        }
        const dist::JoinedWorld joined = elastic.form(*round, round_options(config));
        membership.round = round->round;
        membership.admitted = round;
        return std::make_unique<Trainer>(config, out, progress, joined.world, membership);
      },
      // A member of the round it was admitted to: it meets the others that stayed in the next
      // (the state goes to it from them; with none, the error ends the run and weftrun
      // restarts every worker). Its own wait for them is a second: they met the failure in
      // the same collectives.
      [&] {
        round =
            elastic.next_after_failure(*round, std::max(settle_window(config, 0), Seconds(1.0)));
        return "trying the next round";
      });
}

// Everything that holds the world goes before it.
void Trainer::drop_world() {
  checkpointer_.reset();
  parallel_.reset();
  mesh_.reset();
  world_.reset();
}

// Kept from the first failure of a change until a world takes it: a layout made again and
// left by a failure holds fresh optimizer state, not this.
void Trainer::hold_state() {
  if (held_ || !parallel_) return;
  held_ = HeldState{state_copy(parallel_->state(), true), parallel_->state().optimizer_steps()};
}

void Trainer::enter(const dist::ElasticRound& round) {
  world_ = elastic_->form(round, round_options(config_)).world;
  round_ = round;
  membership_.round = round.round;
  setup_parallelism(true);
  make_checkpointer();
  follow_rank_zero();
  stragglers_ = StragglerWatch{};  // its ranks are this world's
}

void Trainer::follow_rank_zero() {
  std::ostream* now = root() ? &given_out_ : &null_out_;
  if (now == out_) return;
  out_ = now;
  metrics_->finish();
  metrics_ = std::make_unique<MetricsLogger>(*out_, root() ? progress_ : Progress::kNone,
                                             root() ? config_.metrics.jsonl_path : "",
                                             config_.training.steps);
}

void Trainer::start_elastic() {
  elastic_ = std::make_unique<dist::ElasticMembership>(
      dist::connect_job_store(Seconds(config_.comm.rejoin_timeout_seconds)), job_rank_, job_size_,
      admission_wait(config_));
  round_ = membership_.admitted.value_or(elastic_->first());
  // Every world of the job replicates over all of its ranks, however many are left.
  config_.parallelism.data_parallel_replicate_degree = -1;
}

// The survivors meet in the next round.
std::string Trainer::rejoin_elastic() {
  hold_state();
  drop_world();
  return change_world(
      elastic_->next_after_failure(round_, settle_window(config_, last_step_.seconds)));
}

// A process a round left out (it came late) asks to join, as a new one does.
std::string Trainer::change_world(std::optional<dist::ElasticRound> next) {
  const Seconds settle = settle_window(config_, last_step_.seconds);
  std::optional<dist::ElasticRound> round = std::move(next);
  return in_rounds(
      [&]() -> std::string {
        if (!round) {
          left_job_ = true;
          return {};
        }
        try {
          enter(*round);
          const int source =
              take_state_from_most_advanced(held_->copy, held_->optimizer_steps, true);
          held_.reset();
          return "the state of rank " + std::to_string(source);
        } catch (...) {
          drop_world();
          throw;
        }
      },
      [&] {
        round = elastic_->next_after_failure(*round, settle);
        return "trying the next round";
      });
}

void Trainer::admit_joiners() {
  // The round's number, the deaths it has seen, its members (-1 after the last).
  std::vector<std::int64_t> decision(static_cast<std::size_t>(job_size_) + 2, -1);
  if (root()) {
    try {
      if (const std::optional<dist::ElasticRound> next = elastic_->admit(round_)) {
        decision[0] = next->round;
        decision[1] = next->deaths_seen;
        std::copy(next->members.begin(), next->members.end(), decision.begin() + 2);
      }
    } catch (const Error& e) {  // the others wait for the answer: none, this step
      metrics_->log_line(std::string("not admitting new processes after this step: ") + e.what());
    }
  }
  world_->broadcast(decision, 0);
  if (decision[0] < 0) return;
  dist::ElasticRound next{static_cast<int>(decision[0]), {}, decision[1]};
  for (std::size_t i = 2; i < decision.size() && decision[i] >= 0; ++i) {
    next.members.push_back(static_cast<int>(decision[i]));
  }
  // Before the world changes: rank 0 may become another (the new ranks log their joining).
  char line[160];
  std::snprintf(line, sizeof(line), "growing from %d to %zu of %d ranks after step %lld (round %d)",
                world_size_, next.members.size(), job_size_, static_cast<long long>(state_.step),
                next.round);
  metrics_->log_line(line);
  checkpointer_->finish();  // a save in the background completes in the world that began it
  hold_state();
  drop_world();
  change_world(std::move(next));
  if (!left_job_) log_world();
}

}  // namespace weft::train
