// A training run's checkpoints, the same for one process and every data-parallel layout:
// <folder>/step-<8 digits>/checkpoint.safetensors holding the model ("model.<name>"), AdamW's
// moments ("optim.exp_avg.<name>", "optim.exp_avg_sq.<name>") and, in the metadata, the step, the
// optimizer's step count, the data loader's position and the configuration (TOML). The file is
// written to a temporary name and renamed, so a crash at any moment leaves every earlier checkpoint
// intact and the newest one either complete or absent. Layout details: docs/TRAINING.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "weft/checkpoint/safetensors.h"
#include "weft/nn/llama.h"
#include "weft/nn/optim.h"

namespace weft::train {

struct TrainState {
  std::int64_t step = 0;            // steps completed
  std::int64_t loader_batches = 0;  // batches the training loader has drawn
};

// Writes the checkpoint of `state.step` from full (unsharded) tensors: the model's parameters
// and AdamW's state, by name (parallel::ParallelModel::full_state gathers them from any
// layout); then, when keep_latest > 0, removes all but the newest keep_latest checkpoints.
// Returns the file's path.
std::string save_checkpoint(const std::string& folder, const TrainState& state,
                            const nn::StateDict& model, const nn::AdamWState& optimizer,
                            const std::string& config_toml, std::int64_t keep_latest);

// The newest complete checkpoint file under `folder`, if any.
std::optional<std::string> latest_checkpoint(const std::string& folder);

// Copies a checkpoint into the tensors of `model` (and `optimizer`'s moments and step count,
// unless null): every one must be present with its shape, else CheckpointError naming it.
// Returns the saved state.
TrainState load_checkpoint(const checkpoint::SafetensorsFile& file, const std::string& path,
                           const nn::StateDict& model, nn::AdamWState* optimizer);
// The model's parameters alone (generation), from a file already read (`path` names it in
// errors).
TrainState load_checkpoint(const checkpoint::SafetensorsFile& file, const std::string& path,
                           nn::Llama& model);

// The configuration (TOML) a checkpoint file was written with.
std::string checkpoint_config(const checkpoint::SafetensorsFile& file, const std::string& path);

}  // namespace weft::train
