#include "weft/train/checkpointing.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "weft/checkpoint/safetensors.h"

namespace weft::train {
namespace {

namespace fs = std::filesystem;
using checkpoint::CheckpointError;
using checkpoint::NamedTensor;

constexpr const char* kFile = "checkpoint.safetensors";
constexpr const char* kFormat = "weft-train-checkpoint/1";

std::string step_dir(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

// Complete checkpoints under `folder`, oldest first.
std::vector<fs::path> checkpoints(const std::string& folder) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("step-", 0) == 0 && fs::exists(entry.path() / kFile)) {
      found.push_back(entry.path() / kFile);
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::int64_t metadata_int(const checkpoint::SafetensorsFile& file, const std::string& key,
                          const std::string& path) {
  const auto it = file.metadata.find(key);
  if (it == file.metadata.end()) throw CheckpointError(path + ": no '" + key + "' in the metadata");
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    throw CheckpointError(path + ": metadata '" + key + "' = '" + it->second + "' is not a number");
  }
}

void load_into(const checkpoint::SafetensorsFile& file, const std::string& name, Tensor into,
               const std::string& path) {
  const Tensor& saved = file.at(name);
  if (saved.shape() != into.shape() || saved.dtype() != into.dtype()) {
    throw CheckpointError(path + ": " + name + " is " + shape_string(saved.shape()) +
                          " in the checkpoint but " + shape_string(into.shape()) +
                          " in this model; the configurations differ");
  }
  into.copy_from(saved);
}

}  // namespace

std::string save_checkpoint(const std::string& folder, const TrainState& state,
                            const nn::StateDict& model, const nn::AdamWState& optimizer,
                            const std::string& config_toml, std::int64_t keep_latest) {
  const fs::path dir = fs::path(folder) / step_dir(state.step);
  fs::create_directories(dir);
  std::vector<NamedTensor> tensors;
  for (const auto& [name, t] : model) tensors.push_back({"model." + name, t});
  for (std::size_t i = 0; i < optimizer.exp_avg.size(); ++i) {
    tensors.push_back({"optim.exp_avg." + optimizer.exp_avg[i].first, optimizer.exp_avg[i].second});
    tensors.push_back(
        {"optim.exp_avg_sq." + optimizer.exp_avg_sq[i].first, optimizer.exp_avg_sq[i].second});
  }
  const std::string path = (dir / kFile).string();
  checkpoint::save_safetensors(path, tensors,
                               {{"format", kFormat},
                                {"step", std::to_string(state.step)},
                                {"loader_batches", std::to_string(state.loader_batches)},
                                {"optimizer_steps", std::to_string(optimizer.steps)},
                                {"config", config_toml}});
  if (keep_latest > 0) {
    const auto all = checkpoints(folder);
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep_latest) < all.size(); ++i) {
      fs::remove_all(all[i].parent_path());
    }
  }
  return path;
}

std::optional<std::string> latest_checkpoint(const std::string& folder) {
  const auto all = checkpoints(folder);
  if (all.empty()) return std::nullopt;
  return all.back().string();
}

TrainState load_checkpoint(const checkpoint::SafetensorsFile& file, const std::string& path,
                           const nn::StateDict& model, nn::AdamWState* optimizer) {
  if (file.metadata.count("format") == 0 || file.metadata.at("format") != kFormat) {
    throw CheckpointError(path + " is not a weft-train checkpoint (format '" +
                          (file.metadata.count("format") ? file.metadata.at("format") : "") + "')");
  }
  for (const auto& [name, t] : model) load_into(file, "model." + name, t, path);
  if (optimizer != nullptr) {
    for (const auto& [name, t] : optimizer->exp_avg) {
      load_into(file, "optim.exp_avg." + name, t, path);
    }
    for (const auto& [name, t] : optimizer->exp_avg_sq) {
      load_into(file, "optim.exp_avg_sq." + name, t, path);
    }
    optimizer->steps = metadata_int(file, "optimizer_steps", path);
  }
  return {metadata_int(file, "step", path), metadata_int(file, "loader_batches", path)};
}

TrainState load_checkpoint(const checkpoint::SafetensorsFile& file, const std::string& path,
                           nn::Llama& model) {
  return load_checkpoint(file, path, model.parameters().state_dict(), nullptr);
}

std::string checkpoint_config(const checkpoint::SafetensorsFile& file, const std::string& path) {
  const auto it = file.metadata.find("config");
  if (it == file.metadata.end()) throw CheckpointError(path + ": no configuration in the metadata");
  return it->second;
}

}  // namespace weft::train
