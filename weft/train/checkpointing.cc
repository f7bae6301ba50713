#include "weft/train/checkpointing.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "weft/checkpoint/file_io.h"
#include "weft/checkpoint/shard_file.h"

namespace weft::train {
namespace {

namespace fs = std::filesystem;
using checkpoint::CheckpointError;
using checkpoint::IncompatibleCheckpoint;

constexpr std::size_t kMaxManifestBytes = std::size_t{256} << 20;
constexpr char kLockName[] = ".lock";

std::vector<checkpoint::Target> targets_of(const std::vector<parallel::StatePiece>& layout) {
  std::vector<checkpoint::Target> targets;
  for (const parallel::StatePiece& p : layout) targets.push_back({p.name, {p.offsets, p.sizes}});
  return targets;
}

// "<parent>/.<name><suffix>": where a directory goes out of the step-directory namespace.
std::string hidden_sibling(const fs::path& dir, const char* suffix) {
  std::string name = ".";
  name += dir.filename().string();
  name += suffix;
  return (dir.parent_path() / name).string();
}

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// Directories a crash can leave: ".step-*" (a save's or a removal's) and empty step
// directories.
bool leftover(const fs::directory_entry& entry) {
  const std::string name = entry.path().filename().string();
  if (!entry.is_directory()) return false;
  if (name.rfind(".step-", 0) == 0) return true;
  std::error_code ec;
  return step_of_directory(name).has_value() && fs::is_empty(entry.path(), ec);
}

}  // namespace

std::string step_directory_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

std::optional<std::int64_t> step_of_directory(const std::string& name) {
  if (name.size() != 13 || name.rfind("step-", 0) != 0 ||
      name.find_first_not_of("0123456789", 5) != std::string::npos)
    return std::nullopt;
  return std::stoll(name.substr(5));
}

std::vector<std::string> complete_checkpoints(const std::string& folder) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const auto step = step_of_directory(entry.path().filename().string());
    if (step && fs::is_regular_file(entry.path() / checkpoint::kManifestName, ec))
      found.emplace_back(*step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> dirs;
  for (auto& [step, dir] : found) dirs.push_back(std::move(dir));
  return dirs;
}

checkpoint::Manifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / checkpoint::kManifestName).string();
  std::string text;
  try {
    text = checkpoint::read_text_file(path, kMaxManifestBytes);
  } catch (const SystemError& e) {
    throw CheckpointError(std::string("cannot read the checkpoint's manifest: ") + e.what());
  }
  checkpoint::Manifest m = checkpoint::parse_manifest(text, path);
  const auto step = step_of_directory(fs::path(dir).filename().string());
  if (step && *step != m.step) {
    throw CheckpointError("checkpoint manifest " + path + " says step " + std::to_string(m.step) +
                          " in a directory of step " + std::to_string(*step) +
                          "; resume from an earlier checkpoint");
  }
  return m;
}

void check_compatible(const checkpoint::Manifest& manifest,
                      const std::vector<std::pair<std::string, Shape>>& parameters, bool optimizer,
                      const std::string& dir) {
  std::vector<std::pair<std::string, Shape>> wanted;
  for (const char* kind : {"model.", "optim.exp_avg.", "optim.exp_avg_sq."}) {
    if (!optimizer && kind[0] == 'o') continue;
    for (const auto& [name, shape] : parameters) wanted.emplace_back(kind + name, shape);
  }
  const std::string advice =
      " (the checkpoint in " + dir +
      " was written by a model of another configuration: resume with the same [model] "
      "settings, or use another checkpoint.folder)";
  std::set<std::string> known;
  for (const auto& [name, shape] : wanted) {
    known.insert(name);
    const auto it = manifest.tensors.find(name);
    if (it == manifest.tensors.end())
      throw IncompatibleCheckpoint("the model has " + name + ", which the checkpoint lacks" +
                                   advice);
    if (it->second.shape != shape)
      throw IncompatibleCheckpoint(name + " is " + shape_string(it->second.shape) +
                                   " in the checkpoint and " + shape_string(shape) +
                                   " in the model" + advice);
  }
  for (const auto& [name, t] : manifest.tensors) {
    const bool moment = name.rfind("optim.", 0) == 0;
    if (!known.count(name) && !(moment && !optimizer))
      throw IncompatibleCheckpoint("the checkpoint has " + name + ", which the model lacks" +
                                   advice);
  }
}

std::vector<Tensor> read_pieces(const std::string& dir, const checkpoint::Manifest& manifest,
                                const std::vector<parallel::StatePiece>& layout,
                                std::uint64_t* bytes_read) {
  const std::vector<checkpoint::Target> targets = targets_of(layout);
  const std::vector<checkpoint::Read> reads = checkpoint::plan_reads(manifest, targets);
  std::vector<Tensor> values;
  for (const parallel::StatePiece& p : layout) values.push_back(Tensor::zeros(p.sizes));
  const std::uint64_t bytes = checkpoint::execute_reads(dir, manifest, targets, reads, values);
  if (bytes_read != nullptr) *bytes_read += bytes;
  return values;
}

std::string checkpoint_directory(const std::string& given) {
  if (fs::is_regular_file(fs::path(given) / checkpoint::kManifestName)) return given;
  const std::vector<std::string> all = complete_checkpoints(given);
  if (all.empty()) {
    throw InvalidArgument("no checkpoint at " + given +
                          " (a step directory with a manifest.json, or a folder of them; train "
                          "with weft-train and checkpoint.enable = true first)");
  }
  return all.back();
}

checkpoint::Manifest load_model(const std::string& dir_or_folder, nn::Llama& model) {
  const std::string dir = checkpoint_directory(dir_or_folder);
  checkpoint::Manifest manifest = read_manifest(dir);
  check_compatible(manifest, model.whole_parameters(), false, dir);
  std::vector<parallel::StatePiece> layout;
  for (const auto& [name, shape] : model.whole_parameters())
    layout.push_back({"model." + name, shape, std::vector<std::int64_t>(shape.size()), shape});
  const std::vector<Tensor> values = read_pieces(dir, manifest, layout);
  nn::StateDict state;
  for (std::size_t i = 0; i < layout.size(); ++i)
    state.emplace_back(model.whole_parameters()[i].first, values[i]);
  model.parameters().load_state_dict(state);
  return manifest;
}

std::string save_whole_checkpoint(const std::string& folder, checkpoint::Manifest manifest,
                                  const std::vector<checkpoint::PieceData>& tensors) {
  const std::string dir = (fs::path(folder) / step_directory_name(manifest.step)).string();
  const std::string tmp = hidden_sibling(dir, ".saving");
  checkpoint::remove_tree(tmp);
  checkpoint::make_directories(tmp);
  const std::string name = "rank-00000.safetensors";
  const checkpoint::WrittenFile f =
      checkpoint::write_shard_file((fs::path(tmp) / name).string(), tensors,
                                   {{"format", "weft-distributed-checkpoint shard"},
                                    {"step", std::to_string(manifest.step)},
                                    {"rank", "0"}});
  manifest.files = {{name, 0, f.bytes, f.header_bytes, f.header_checksum}};
  manifest.tensors.clear();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    checkpoint::TensorEntry& t = manifest.tensors[tensors[i].tensor];
    t.dtype = tensors[i].data.dtype();
    t.shape = tensors[i].box.sizes;
    t.chunks = {f.chunks[i]};
  }
  commit_checkpoint(tmp, dir, manifest);
  return dir;
}

void commit_checkpoint(const std::string& tmp, const std::string& final_dir,
                       const checkpoint::Manifest& manifest) {
  checkpoint::write_text_file((fs::path(tmp) / checkpoint::kManifestName).string(),
                              checkpoint::to_json(manifest));
  checkpoint::sync_directory(tmp);
  if (fs::exists(final_dir)) {  // the same step saved again: the old one goes only after
    const std::string old = hidden_sibling(final_dir, ".replaced");
    checkpoint::remove_tree(old);
    checkpoint::rename_durably(final_dir, old);
    checkpoint::rename_durably(tmp, final_dir);
    checkpoint::remove_tree(old);
    return;
  }
  checkpoint::rename_durably(tmp, final_dir);
}

void prune_checkpoints(const std::string& folder, std::int64_t keep,
                       const std::set<std::string>& unusable, std::int64_t saved_step) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    if (leftover(entry)) checkpoint::remove_tree(entry.path().string());
  }
  if (keep <= 0) return;
  std::vector<std::string> all;
  for (const std::string& dir : complete_checkpoints(folder)) {
    const auto step = step_of_directory(fs::path(dir).filename().string());
    if (!unusable.count(dir) && step && *step <= saved_step) all.push_back(dir);
  }
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) {
    const std::string doomed = hidden_sibling(all[i], ".removing");
    checkpoint::rename_durably(all[i], doomed);
    checkpoint::remove_tree(doomed);
  }
}

FolderLock::FolderLock(const std::string& folder) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec || !fs::is_directory(folder)) {
    throw CheckpointError("checkpoint.folder = '" + folder + "' cannot be used: " +
                          (ec ? ec.message() : "it exists and is not a directory") +
                          "; choose another checkpoint.folder");
  }
  const std::string path = (fs::path(folder) / kLockName).string();
  fd_ = UniqueFd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd_) {
    throw CheckpointError("checkpoint.folder = '" + folder + "' is not writable (" +
                          std::strerror(errno) +
                          "); fix its permissions or choose another checkpoint.folder");
  }
  if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    char holder[512] = {};
    const ssize_t n = ::pread(fd_.get(), holder, sizeof(holder) - 1, 0);
    throw CheckpointError("checkpoint.folder = '" + folder + "' is in use by another run (" +
                          (n > 0 ? std::string(holder, static_cast<std::size_t>(n)) : "unknown") +
                          "); wait for it to finish or choose another checkpoint.folder");
  }
  // The lock file may exist from an earlier run: creating a file is the test that counts.
  const std::string probe = (fs::path(folder) / (".probe-" + std::to_string(::getpid()))).string();
  if (UniqueFd p(::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)); !p) {
    throw CheckpointError("checkpoint.folder = '" + folder + "' is not writable (" +
                          std::strerror(errno) +
                          "); fix its permissions or choose another checkpoint.folder");
  }
  ::unlink(probe.c_str());
  const std::string me = "pid " + std::to_string(::getpid()) + " on host " + hostname();
  if (::ftruncate(fd_.get(), 0) != 0 ||
      ::pwrite(fd_.get(), me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    throw CheckpointError("checkpoint.folder = '" + folder + "' is not writable (" +
                          std::strerror(errno) +
                          "); free some space, fix its permissions or choose another folder");
  }
}

}  // namespace weft::train
