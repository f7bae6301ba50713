// What in-place recovery moves between ranks (docs/RECOVERY.md): a copy of the training state
// a rank holds, with the trainer's position after the step it was taken at, and the buddy
// copies that let sharded layouts rebuild a dead rank's state from its neighbour's memory.
#pragma once

#include <cstdint>
#include <vector>

#include "weft/dist/process_group.h"
#include "weft/parallel/parallelize.h"
#include "weft/tensor/tensor.h"
#include "weft/train/checkpointer.h"

namespace weft::train {

// This rank's pieces of a training state (TrainingState::layout's order) as views of one
// block, which one message can carry: a block of 2 MiB or more is mapped in huge pages, so
// that its first touch costs a few page faults instead of one every 4 KiB (15-30 us each on
// the VMs measured). `fill`: with the state's values (TrainingState::copy), else zeros.
struct StateCopy {
  Tensor block;
  std::vector<Tensor> pieces;
};
StateCopy state_copy(parallel::TrainingState& state, bool fill);

// The trainer's position after a step: what a copy of the state is restored with.
struct StepStamp {
  TrainState train{.step = -1};  // step -1: no copy
  std::int64_t optimizer_steps = 0;
  double peak_gflops = 0;  // the start-up's, which a replacement does not measure
  double loss = 0, grad_norm = 0, seconds = 0;  // the step's, for its log line

  std::vector<std::int64_t> encode() const;
  static StepStamp decode(const std::vector<std::int64_t>& words);
  static constexpr std::size_t kWords = 8;
};

// Copies for sharded layouts, where no other rank holds a dead rank's pieces: after a step,
// take() copies this rank's pieces into memory of its own and sends them to the next world
// rank (rank r's go to (r + 1) % size, its buddy), keeping the last two of each kind so that a
// copy cut short by a death leaves the one before. restore() brings a world formed again, with
// the same layout, back to the newest step every rank's pieces survived at. Holds no
// reference to a world or a state: the ranks that stay keep it across the world's rebuilding.
class BuddyCopies {
 public:
  // Collective over `world`: a send to the buddy and a receive from the rank before.
  void take(dist::ProcessGroup& world, parallel::TrainingState& state, const StepStamp& stamp);
  // Collective over a world formed again (on a replacement, a fresh BuddyCopies): loads into
  // `state` the newest step at which every rank has its own copy, or the buddy of a rank that
  // has none (a replacement) has it; then take()s copies again, so that the replacement's
  // pieces have a buddy too. weft::Error on every rank when there is no such step (two
  // neighbouring ranks died, or the first copy was never taken).
  StepStamp restore(dist::ProcessGroup& world, parallel::TrainingState& state);
  // The memory the copies hold: all of it from the second take() on.
  std::int64_t bytes() const;
  std::int64_t takes() const { return takes_; }

 private:
  struct Copy {
    StepStamp stamp;
    Tensor block;
  };
  // The copy of `pair` to overwrite: an empty one, else the older.
  static Copy& oldest(Copy (&pair)[2]);
  // The copy of `pair` taken after step `step`, or null.
  static Copy* at(Copy (&pair)[2], std::int64_t step);

  Copy own_[2];   // this rank's pieces
  Copy held_[2];  // the pieces of the rank before (its buddy's copies)
  std::int64_t takes_ = 0;
};

}  // namespace weft::train
