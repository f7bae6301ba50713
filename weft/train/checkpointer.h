// weft-train's distributed checkpoints (docs/CHECKPOINTS.md). Saving: every rank copies the
// pieces of the training state the write plan gives it (each distinct piece once, replicas
// sharing the writing) into a staging buffer, writes them into its own file of a temporary
// directory and syncs it; once every rank's file is on disk, rank 0 writes the manifest and
// renames the directory into place, then prunes (checkpoint.keep_latest). With
// checkpoint.async_mode = "async" the writing runs on a background thread over a process
// group of its own while training continues. Loading: every rank reads only the pieces it
// holds under the current layout, from whatever layout wrote them, each chunk verified.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "weft/checkpoint/shard_file.h"
#include "weft/dist/process_group.h"
#include "weft/parallel/device_mesh.h"
#include "weft/parallel/parallelize.h"
#include "weft/train/checkpointing.h"
#include "weft/train/config.h"

namespace weft::train {

// The training state besides the tensors.
struct TrainState {
  std::int64_t step = 0;           // steps completed
  std::int64_t samples_drawn = 0;  // the training loader's cursor (DataLoader::samples_drawn)
  double lr = 0;                   // of the last step
};

// A step's loss or gradient norm was NaN or infinite (training.on_nonfinite = "stop"), or the
// state about to be saved holds a NaN or an infinity.
class NonFiniteError : public Error {
 public:
  using Error::Error;
};

class Checkpointer {
 public:
  // Collective over `world` (null: one process), before any training. With
  // checkpoint.enable, rank 0 creates, checks and locks checkpoint.folder and removes what
  // crashed saves left (prune_checkpoints): a folder that cannot be used is a CheckpointError
  // on every rank. `state` and `mesh` outlive this object; `log` takes the lines for rank 0's
  // log (called on every rank).
  Checkpointer(const Config& config, std::shared_ptr<dist::ProcessGroup> world,
               parallel::TrainingState& state, const parallel::DeviceMesh* mesh,
               std::function<void(const std::string&)> log);
  ~Checkpointer();  // waits for a save in flight
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective. Loads the newest complete checkpoint under checkpoint.folder whose every
  // piece this layout needs reads back, verifies and is finite, falling back to older ones
  // (and saying why); nullopt, said in the log, when there is none. IncompatibleCheckpoint
  // (another model) and a folder whose checkpoints all fail are errors on every rank. The
  // checkpoints that failed are left in place and never counted or removed by pruning.
  std::optional<TrainState> resume();

  // Collective. Saves the state after `state.step`: the pieces are copied before this returns;
  // with async_mode "async" they are written in the background (a save still in flight is
  // waited for first). CheckpointError (every rank) when a save fails; NonFiniteError (every
  // rank, nothing saved or pruned) when a piece holds a NaN or an infinity.
  void save(const TrainState& state);
  // Collective, once per step: a background save that has finished on every rank is
  // reported (its error thrown on every rank). Cheap: one small all-reduce while a save is in
  // flight, nothing otherwise.
  void poll();
  // Waits for the save in flight; its error is thrown on every rank. Collective.
  void finish();
  // Wall seconds the training loop spent in the last save() (staging, and waiting for an
  // earlier save).
  double last_stall_seconds() const { return last_stall_seconds_; }

 private:
  struct Job;
  void say_whose_checkpoints_stay() const;
  std::string write(const Job& job);  // "" or the error; collective over group_
  std::string commit(const Job& job, const std::vector<std::string>& results);  // rank 0
  std::string try_load(const std::string& dir, std::vector<Tensor>& values,
                       checkpoint::Manifest& manifest);
  void report(const std::string& outcome, const std::string& what);
  // NonFiniteError on every rank when a staged piece holds a NaN or an infinity.
  void refuse_nonfinite(std::int64_t step);

  const Config& config_;
  std::shared_ptr<dist::ProcessGroup> world_, group_;  // group_: the saves' own (async)
  parallel::TrainingState& state_;
  const parallel::DeviceMesh* mesh_;
  std::function<void(const std::string&)> log_;
  int rank_ = 0, size_ = 1;
  std::vector<parallel::StatePiece> layout_;  // this rank's pieces
  std::vector<bool> writes_;                  // which of them this rank writes
  std::vector<Tensor> staging_;          // their copies for the save in flight, kept for the next
  std::map<std::string, Shape> shapes_;  // every tensor's whole shape
  std::set<std::string> unusable_;       // the checkpoints resume() could not load
  std::unique_ptr<FolderLock> lock_;     // rank 0, with checkpoint.enable
  std::future<std::string> in_flight_;   // the background save's outcome
  std::string in_flight_dir_;
  std::chrono::steady_clock::time_point in_flight_start_;
  double last_stall_seconds_ = 0;
  std::uint64_t bytes_read_ = 0;  // by the last load tried
  // Rank 0: the last save's bytes over all files, and its largest file's.
  std::pair<std::uint64_t, std::uint64_t> written_{0, 0};
};

}  // namespace weft::train
