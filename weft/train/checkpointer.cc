#include "weft/train/checkpointer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "weft/checkpoint/file_io.h"

namespace weft::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// "" when every element of `values` is finite, else which piece holds what where.
std::string first_nonfinite(const std::vector<Tensor>& values,
                            const std::vector<parallel::StatePiece>& layout) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float* v = values[i].data<float>();
    const float* end = v + values[i].numel();
    const float* at = std::find_if(v, end, [](float x) { return !std::isfinite(x); });
    if (at != end) {
      return layout[i].name + " holds " + std::to_string(*at) + " at element " +
             std::to_string(at - v) + " of this rank's piece";
    }
  }
  return "";
}

// Every rank's `mine`, in rank order (a collective over `group`; null: one process).
std::vector<std::string> gather_strings(dist::ProcessGroup* group, const std::string& mine) {
  if (group == nullptr) return {mine};
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(group->size()));
  std::vector<std::int64_t> length{static_cast<std::int64_t>(mine.size())};
  group->all_gather(lengths, length);
  std::vector<std::size_t> counts(lengths.begin(), lengths.end());
  std::size_t total = 0;
  for (std::size_t n : counts) total += n;
  std::string all(total, '\0');
  group->all_gather_v(dist::Buffer(all.data(), total, DType::kUInt8),
                      dist::Buffer(const_cast<char*>(mine.data()), mine.size(), DType::kUInt8),
                      counts);
  std::vector<std::string> each;
  std::size_t at = 0;
  for (std::size_t n : counts) {
    each.push_back(all.substr(at, n));
    at += n;
  }
  return each;
}

json layout_json(const std::vector<parallel::StatePiece>& layout) {
  json pieces = json::array();
  for (const auto& p : layout) pieces.push_back({p.name, p.shape, p.offsets, p.sizes});
  return pieces;
}

std::string file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05d.safetensors", rank);
  return name;
}

}  // namespace

struct Checkpointer::Job {
  TrainState state;
  std::int64_t optimizer_steps = 0;
  std::string dir, tmp;
  std::vector<checkpoint::PieceData> pieces;  // this rank's to write
};

Checkpointer::Checkpointer(const Config& config, std::shared_ptr<dist::ProcessGroup> world,
                           parallel::TrainingState& state, const parallel::DeviceMesh* mesh,
                           std::function<void(const std::string&)> log)
    : config_(config), world_(std::move(world)), state_(state), mesh_(mesh), log_(std::move(log)) {
  rank_ = world_ ? world_->rank() : 0;
  size_ = world_ ? world_->size() : 1;
  layout_ = state_.layout();
  if (!config_.checkpoint.enable) return;
  // The write plan: every rank's pieces, each distinct one written once.
  const std::vector<std::string> all = gather_strings(world_.get(), layout_json(layout_).dump());
  std::vector<std::vector<checkpoint::HeldPiece>> held(all.size());
  for (std::size_t r = 0; r < all.size(); ++r) {
    for (const json& p : json::parse(all[r])) {
      const auto name = p[0].get<std::string>();
      shapes_[name] = p[1].get<Shape>();
      held[r].push_back({name, {p[2].get<std::vector<std::int64_t>>(), p[3].get<Shape>()}});
    }
  }
  writes_ = checkpoint::plan_writes(held, sizeof(float))[static_cast<std::size_t>(rank_)];
  // The staging buffer, allocated now rather than by the first save's step (page faults over
  // the whole state cost that step about ten times the copy's time).
  state_.copy(staging_);
  std::string problem;
  if (rank_ == 0) {
    try {
      lock_ = std::make_unique<FolderLock>(config_.checkpoint.folder);
      prune_checkpoints(config_.checkpoint.folder, 0);  // what crashed runs left
      if (!config_.checkpoint.resume) say_whose_checkpoints_stay();
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  problem = gather_strings(world_.get(), problem)[0];
  if (!problem.empty()) throw checkpoint::CheckpointError(problem);
  if (world_)
    group_ = world_->new_group([&] {
      std::vector<int> ranks(static_cast<std::size_t>(size_));
      for (int r = 0; r < size_; ++r) ranks[static_cast<std::size_t>(r)] = r;
      return ranks;
    }());
}

// A run that does not resume, in a folder holding an earlier run's checkpoints: pruning passes
// over those above the step it saves (prune_checkpoints), and the user learns what that means.
void Checkpointer::say_whose_checkpoints_stay() const {
  const std::vector<std::string> earlier = complete_checkpoints(config_.checkpoint.folder);
  if (earlier.empty()) return;
  std::string names;
  for (const std::string& dir : earlier) {
    names += (names.empty() ? "" : ", ") + fs::path(dir).filename().string();
  }
  log_("checkpoint.folder " + config_.checkpoint.folder + " holds an earlier run's checkpoints (" +
       names +
       "): this run prunes none above the step it saves, and replaces each it reaches; a resume "
       "before then loads the newest of them (a folder of its own keeps a run apart)");
}

Checkpointer::~Checkpointer() {
  if (in_flight_.valid()) {
    try {
      in_flight_.get();
    } catch (const std::exception&) {
      // Reported by finish() when the run ends normally; here the run is failing already.
    }
  }
}

std::string Checkpointer::try_load(const std::string& dir, std::vector<Tensor>& values,
                                   checkpoint::Manifest& manifest) {
  try {
    manifest = read_manifest(dir);
    check_compatible(manifest, state_.whole_parameters(), true, dir);
    values = read_pieces(dir, manifest, layout_, &bytes_read_);
    if (const std::string bad = first_nonfinite(values, layout_); !bad.empty()) {
      return "C" + bad + " (its checksums agree: the run that saved it had diverged)";
    }
    return "";
  } catch (const checkpoint::IncompatibleCheckpoint& e) {
    return std::string("I") + e.what();
  } catch (const std::exception& e) {
    return std::string("C") + e.what();
  }
}

std::optional<TrainState> Checkpointer::resume() {
  const std::string& folder = config_.checkpoint.folder;
  std::string listing;
  if (rank_ == 0) {
    for (const std::string& dir : complete_checkpoints(folder)) listing += dir + "\n";
  }
  listing = gather_strings(world_.get(), listing)[0];
  std::vector<std::string> dirs;
  for (std::size_t at = 0, end; (end = listing.find('\n', at)) != std::string::npos; at = end + 1)
    dirs.push_back(listing.substr(at, end - at));
  if (dirs.empty()) {
    log_("checkpoint.resume: no complete checkpoint in " + folder +
         (fs::exists(folder) ? "" : " (the folder does not exist)") + "; starting from step 1");
    return std::nullopt;
  }
  std::string failures;
  for (auto dir = dirs.rbegin(); dir != dirs.rend(); ++dir) {
    const auto start = Clock::now();
    bytes_read_ = 0;
    std::vector<Tensor> values;
    checkpoint::Manifest m;
    const std::vector<std::string> errors = gather_strings(world_.get(), try_load(*dir, values, m));
    // The rank that failed first, if any.
    const auto bad =
        std::find_if(errors.begin(), errors.end(), [](const std::string& e) { return !e.empty(); });
    if (bad == errors.end()) {
      state_.load(values, m.optimizer_steps);
      char read[96];
      std::snprintf(read, sizeof(read), "; rank 0 read %.1f MiB in %.2f s",
                    static_cast<double>(bytes_read_) / (1 << 20), seconds_since(start));
      log_("resumed from " + *dir + " at step " + std::to_string(m.step) + " (written by " +
           std::to_string(m.world_size) + " rank" + (m.world_size == 1 ? "" : "s") + read + ")");
      if (m.seed != config_.training.seed) {
        log_("note: the checkpoint was trained with training.seed " + std::to_string(m.seed) +
             "; this run continues with " + std::to_string(config_.training.seed) +
             ", which changes the order of the data from here on");
      }
      return TrainState{m.step, m.samples_drawn, m.lr};
    }
    // Its message without the kind (I: incompatible, C: damaged).
    const std::string message =
        "rank " + std::to_string(bad - errors.begin()) + ": " + bad->substr(1);
    if ((*bad)[0] == 'I') throw checkpoint::IncompatibleCheckpoint(message);
    log_("checkpoint " + *dir + " cannot be used (" + message +
         "); falling back to the one before it (this one is kept, and pruning passes it by)");
    unusable_.insert(*dir);
    failures += "\n  " + *dir + ": " + message;
  }
  throw checkpoint::CheckpointError("none of the " + std::to_string(dirs.size()) +
                                    " checkpoints in " + folder + " can be loaded:" + failures +
                                    "\nmove them away (or set checkpoint.resume = false) to "
                                    "start from step 1");
}

void Checkpointer::save(const TrainState& state) {
  const auto start = Clock::now();
  finish();  // at most one save in flight
  auto job = std::make_shared<Job>();
  job->state = state;
  job->optimizer_steps = state_.optimizer_steps();
  const fs::path folder(config_.checkpoint.folder);
  job->dir = (folder / step_directory_name(state.step)).string();
  std::string tmp_name = ".";  // hidden: never taken for a checkpoint, removed by pruning
  tmp_name += step_directory_name(state.step);
  tmp_name += ".saving";
  job->tmp = (folder / tmp_name).string();
  // The staging copy: the buffers of the previous save (finished above) are reused.
  state_.copy(staging_);
  refuse_nonfinite(state.step);
  for (std::size_t i = 0; i < staging_.size(); ++i) {
    if (writes_[i])
      job->pieces.push_back({layout_[i].name, {layout_[i].offsets, layout_[i].sizes}, staging_[i]});
  }
  in_flight_dir_ = job->dir;
  in_flight_start_ = start;
  if (config_.checkpoint.async_mode == "async") {
    in_flight_ = std::async(std::launch::async, [this, job] { return write(*job); });
  } else {
    report(write(*job), job->dir);
  }
  last_stall_seconds_ = seconds_since(start);
}

std::string Checkpointer::write(const Job& job) {
  dist::ProcessGroup* group = group_.get();
  std::string error;
  if (rank_ == 0) {
    try {
      checkpoint::remove_tree(job.tmp);  // a crashed save's
      checkpoint::make_directories(job.tmp);
    } catch (const std::exception& e) {
      error = std::string("cannot create ") + job.tmp + ": " + e.what();
    }
  }
  error = gather_strings(group, error)[0];
  if (!error.empty()) return "checkpoint " + job.dir + " not saved: " + error;
  json result;
  try {
    if (!job.pieces.empty()) {
      const checkpoint::WrittenFile f =
          checkpoint::write_shard_file((fs::path(job.tmp) / file_name(rank_)).string(), job.pieces,
                                       {{"format", "weft-distributed-checkpoint shard"},
                                        {"step", std::to_string(job.state.step)},
                                        {"rank", std::to_string(rank_)}});
      json chunks = json::array();
      for (std::size_t i = 0; i < f.chunks.size(); ++i) {
        const checkpoint::ChunkEntry& c = f.chunks[i];
        chunks.push_back(
            {job.pieces[i].tensor, c.box.offsets, c.box.sizes, c.begin, c.end, c.checksum});
      }
      result = {{"bytes", f.bytes},
                {"header_bytes", f.header_bytes},
                {"header_checksum", f.header_checksum},
                {"chunks", chunks}};
    } else {
      result = {{"chunks", json::array()}};
    }
  } catch (const std::exception& e) {
    result = {{"error", e.what()}};
  }
  const std::vector<std::string> results = gather_strings(group, result.dump());
  return gather_strings(group, rank_ == 0 ? commit(job, results) : "")[0];
}

// Rank 0: the manifest from every rank's file, once all are on disk.
std::string Checkpointer::commit(const Job& job, const std::vector<std::string>& results) {
  checkpoint::Manifest m;
  m.step = job.state.step;
  m.optimizer_steps = job.optimizer_steps;
  m.samples_drawn = job.state.samples_drawn;
  m.seed = config_.training.seed;
  m.lr = job.state.lr;
  m.world_size = size_;
  if (mesh_ != nullptr) m.mesh = mesh_->dims();
  m.config = to_toml(config_);
  std::string error;
  for (std::size_t r = 0; r < results.size() && error.empty(); ++r) {
    const json j = json::parse(results[r]);
    if (j.contains("error")) {
      error = "rank " + std::to_string(r) + ": " + j["error"].get<std::string>();
      break;
    }
    if (j["chunks"].empty()) continue;
    const int file = static_cast<int>(m.files.size());
    m.files.push_back({file_name(static_cast<int>(r)), static_cast<int>(r),
                       j["bytes"].get<std::uint64_t>(), j["header_bytes"].get<std::uint64_t>(),
                       j["header_checksum"].get<std::uint64_t>()});
    for (const json& c : j["chunks"]) {
      const auto name = c[0].get<std::string>();
      checkpoint::TensorEntry& t = m.tensors[name];
      t.shape = shapes_.at(name);
      t.chunks.push_back({{c[1].get<std::vector<std::int64_t>>(), c[2].get<Shape>()},
                          file,
                          c[3].get<std::uint64_t>(),
                          c[4].get<std::uint64_t>(),
                          c[5].get<std::uint64_t>()});
    }
  }
  try {
    if (error.empty()) {
      for (auto& [name, t] : m.tensors) {
        std::sort(t.chunks.begin(), t.chunks.end(),
                  [](const auto& a, const auto& b) { return a.box.offsets < b.box.offsets; });
      }
      written_ = {0, 0};
      for (const checkpoint::FileEntry& f : m.files) {
        written_.first += f.bytes;
        written_.second = std::max(written_.second, f.bytes);
      }
      commit_checkpoint(job.tmp, job.dir, m);
      unusable_.erase(job.dir);  // a failed one saved again is good now
      prune_checkpoints(config_.checkpoint.folder, config_.checkpoint.keep_latest, unusable_,
                        job.state.step);
      return "";
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  try {
    checkpoint::remove_tree(job.tmp);
  } catch (const std::exception&) {
    // Left for the next start-up's pruning; the error that matters is the one reported.
  }
  return "checkpoint " + job.dir + " not saved (the previous checkpoints are intact): " + error;
}

// Training can make a weight or a moment non-finite while the step's loss and gradient norm
// stay finite (a NaN in a moment, a row the batch never reads): such a state would pass every
// checksum and be saved, and pruning would then remove the good checkpoints before it.
void Checkpointer::refuse_nonfinite(std::int64_t step) {
  const std::vector<std::string> found =
      gather_strings(world_.get(), first_nonfinite(staging_, layout_));
  const auto bad =
      std::find_if(found.begin(), found.end(), [](const std::string& e) { return !e.empty(); });
  if (bad == found.end()) return;
  throw NonFiniteError("step " + std::to_string(step) + ": rank " +
                       std::to_string(bad - found.begin()) + "'s " + *bad +
                       ", so training stopped and step " + std::to_string(step) +
                       " was not saved (the newest checkpoint in " + config_.checkpoint.folder +
                       " is the last good state). Resume from it with a lower optimizer.lr or "
                       "training.max_norm");
}

void Checkpointer::poll() {
  if (!in_flight_.valid()) return;
  std::vector<std::int32_t> done{
      in_flight_.wait_for(std::chrono::seconds(0)) == std::future_status::ready ? 1 : 0};
  if (world_) world_->all_reduce(done, dist::ReduceOp::kMin);
  if (done[0] == 1) report(in_flight_.get(), in_flight_dir_);
}

void Checkpointer::finish() {
  if (in_flight_.valid()) report(in_flight_.get(), in_flight_dir_);
}

void Checkpointer::report(const std::string& outcome, const std::string& dir) {
  if (!outcome.empty()) throw checkpoint::CheckpointError(outcome);
  char took[128];
  std::snprintf(took, sizeof(took), " (%.2f s; %.1f MiB, at most %.1f MiB by one rank)",
                seconds_since(in_flight_start_), static_cast<double>(written_.first) / (1 << 20),
                static_cast<double>(written_.second) / (1 << 20));
  log_("saved checkpoint " + dir + took);
}

}  // namespace weft::train
