// Elastic membership of a job (weftrun --recover elastic, docs/RECOVERY.md): which of its
// processes form each round of its world, as ranks die and processes join, agreed through the
// job's store without a coordinator. A round is written once (the first proposal for its number
// wins, compare_set); every wait has a deadline.
//
//   survivors of round R:  after_failure(R)  -> round R + 1 of those that arrived in time
//   a new process:         join()            -> the round that admits it
//   rank 0 of a round:     admit(R)          -> round R + 1 with the processes waiting to join
//   rank 0 at the end:     finish()          -> processes still waiting go home
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/dist/init.h"
#include "weft/store/death_log.h"
#include "weft/store/store.h"

namespace weft::dist {

// A round of the job's world: its number and its members' job ranks (the RANK each process was
// started with, which a replacement keeps), ascending. A member's rank in the round's world is
// its index. A death of a member's job rank that weftrun recorded after the first
// `deaths_seen` (store/death_log.h) is that member's: those before it were its predecessors'.
struct ElasticRound {
  int round = 0;
  std::vector<int> members;
  std::int64_t deaths_seen = 0;

  int rank_of(int job_rank) const;  // -1 when not a member
  bool operator==(const ElasticRound&) const = default;
};

class ElasticMembership {
 public:
  // Process `job_rank` of a job of `job_size` processes, through `store` (the job's, under this
  // attempt: connect_job_store), which outlives every rank. join() waits at most `timeout`
  // (weft::TimeoutError); each store call, the store's own timeout. Values read from the store
  // are checked: weft::Error names one that is not this job's.
  ElasticMembership(std::shared_ptr<store::Store> store, int job_rank, int job_size,
                    Seconds timeout);

  // Round 0: every process of the job.
  ElasticRound first() const;
  // After `broken` failed (a member died): round broken.round + 1, of broken's members that
  // arrived here before the first of them to arrive had waited `settle` (its own; closed at
  // once when every member has arrived or is recorded dead). A round admit() proposed for
  // that number, which this process did not take part in, is passed over for the next. The result
  // may leave this process out (it arrived too late): it then join()s as a new process would.
  ElasticRound after_failure(const ElasticRound& broken, Seconds settle);
  // after_failure, or join() when its round leaves this process out (saying so on stderr):
  // the round this process is a member of next, std::nullopt when the job finished first.
  std::optional<ElasticRound> next_after_failure(const ElasticRound& broken, Seconds settle);
  // A process outside the world (started in place of a dead one, or left out): asks to be
  // admitted and waits until a round's rank 0 admits it; std::nullopt when the job finished
  // first. weft::Error at once when every member of the newest round is recorded dead: no
  // process holds the training state to admit it with.
  std::optional<ElasticRound> join();
  // Rank 0 of `current` alone, at a step boundary (then telling the others): round
  // current.round + 1 with every process waiting to join, or std::nullopt when none waits (two
  // store calls) or a failure already claimed that round number. A process that died between
  // asking and saying who it is is passed over after a second.
  std::optional<ElasticRound> admit(const ElasticRound& current);
  // The job finished: processes waiting in join() return std::nullopt.
  void finish();
  // `round`'s world, this process at its index: join_process_group with `options`' backend and
  // timeout.
  JoinedWorld form(const ElasticRound& round, InitOptions options) const;

 private:
  std::optional<ElasticRound> proposed(int round, char* kind);
  ElasticRound propose(int round, char kind, const std::vector<int>& members,
                       std::int64_t deaths_seen, char* won_kind);
  bool all_arrived_or_dead(const ElasticRound& broken, const std::string& at);
  bool all_dead(const ElasticRound& round) const;
  const ElasticRound& newest_round();

  std::shared_ptr<store::Store> store_;
  int job_rank_, job_size_;
  Seconds timeout_;
  store::DeathLog deaths_;
  std::optional<ElasticRound> newest_;  // join(): the newest round found so far
};

}  // namespace weft::dist
