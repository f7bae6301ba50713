// A training run's checkpoints on disk: <folder>/step-<8 digits>/, each a distributed
// checkpoint (weft/checkpoint: rank-<5 digits>.safetensors files and manifest.json, written
// last; docs/CHECKPOINTS.md). These are the folder-level steps, without communication:
// listing, checking a checkpoint against a model, reading a rank's pieces, committing a
// written directory, pruning, and the folder's lock. Checkpointer (checkpointer.h) runs them
// on every rank.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "weft/base/unique_fd.h"
#include "weft/checkpoint/manifest.h"
#include "weft/checkpoint/shard_file.h"
#include "weft/nn/llama.h"
#include "weft/parallel/parallelize.h"

namespace weft::train {

std::string step_directory_name(std::int64_t step);  // "step-00000100"
// The step a directory name says, if it is a step directory's ("step-00000100": 100).
std::optional<std::int64_t> step_of_directory(const std::string& name);

// The complete checkpoints under `folder` (step directories holding a manifest), oldest first.
std::vector<std::string> complete_checkpoints(const std::string& folder);

// The manifest of the checkpoint in `dir`, checked (parse_manifest), its step the one the
// directory name says. CheckpointError otherwise.
checkpoint::Manifest read_manifest(const std::string& dir);

// IncompatibleCheckpoint naming the first tensor that differs (missing, extra, or of another
// shape) unless the checkpoint holds exactly `parameters` (a model's whole_parameters()) and,
// with `optimizer`, AdamW's two moments of each.
void check_compatible(const checkpoint::Manifest& manifest,
                      const std::vector<std::pair<std::string, Shape>>& parameters, bool optimizer,
                      const std::string& dir);

// The pieces `layout` describes, read from the checkpoint in `dir` and verified (a new tensor
// each, in the layout's order); adds the bytes read to `*bytes_read` (unless null).
std::vector<Tensor> read_pieces(const std::string& dir, const checkpoint::Manifest& manifest,
                                const std::vector<parallel::StatePiece>& layout,
                                std::uint64_t* bytes_read = nullptr);

// A whole model's parameters from a checkpoint directory or a folder (its newest complete
// checkpoint), for generation: the model must be one process's (no parallelism). Returns the
// manifest.
checkpoint::Manifest load_model(const std::string& dir_or_folder, nn::Llama& model);
// The checkpoint directory `given` names: itself, or the newest complete one under it.
// InvalidArgument when there is none.
std::string checkpoint_directory(const std::string& given);

// Writes a checkpoint of one process's whole tensors (`manifest` gives everything but the
// files and tensors) as <folder>/step-<manifest.step>: what `weft-ckpt convert` makes of a
// single-file checkpoint. Returns the directory.
std::string save_whole_checkpoint(const std::string& folder, checkpoint::Manifest manifest,
                                  const std::vector<checkpoint::PieceData>& tensors);

// Writes `manifest` into `tmp` (which holds the files it lists), syncs it, and renames it to
// `final_dir`, replacing a checkpoint of the same step; a crash at any instant leaves either
// the old directory or the new one complete.
void commit_checkpoint(const std::string& tmp, const std::string& final_dir,
                       const checkpoint::Manifest& manifest);

// Removes all but the newest `keep` complete checkpoints under `folder` (keep 0: none
// removed), each renamed out of the step-directory namespace first so that a crash while
// removing leaves no half-deleted checkpoint behind; and what earlier crashes left: the
// temporary directories of saves and removals, empty step directories. The directories in
// `unusable` (checkpoints that failed to load: damaged, or holding non-finite values) are
// neither counted nor removed, so that the good ones kept are `keep` good ones; nor are those
// above `saved_step` (the step the run just saved: any above it are an earlier run's, in a
// folder a new run shares), so that a run never deletes what it just saved.
void prune_checkpoints(const std::string& folder, std::int64_t keep,
                       const std::set<std::string>& unusable = {},
                       std::int64_t saved_step = std::numeric_limits<std::int64_t>::max());

// The checkpoint folder of one run: created if missing, checked writable, and locked
// (flock, released when the process exits however it exits) with the holder's pid and host
// in the lock file, so that a second run writing into it fails at start-up with both named.
// CheckpointError otherwise, naming the folder and what to do.
class FolderLock {
 public:
  explicit FolderLock(const std::string& folder);

 private:
  UniqueFd fd_;
};

}  // namespace weft::train
