// weft-ckpt: looks into, checks and converts weft-train's distributed checkpoints
// (docs/CHECKPOINTS.md).
//
//   weft-ckpt inspect checkpoints/debug              the newest checkpoint: step, mesh, tensors
//   weft-ckpt verify checkpoints/debug/step-00000100 every file and checksum
//             [--deep]                                and that the files hold exactly the
//                                                     manifest's chunks, tiling each tensor once
//   weft-ckpt consolidate checkpoints/debug out/     the model as Hugging Face's Llama: config.json
//             [--max-shard-mb 500] [--dtype bfloat16]  and model.safetensors (or shards + index)
//             [--names weft [--optimizer]]           weft's names and layout (AdamW's moments too)
//   weft-ckpt convert old/checkpoint.safetensors checkpoints/debug [--data-parallel N]
//
// A checkpoint is a step directory or a folder (its newest complete checkpoint). Exit codes:
// 0 done; 2 a bad command line; 1 the checkpoint is damaged or cannot be used (the message
// says what).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "progress_line.h"
#include "weft/checkpoint/deep_verify.h"
#include "weft/checkpoint/file_io.h"
#include "weft/checkpoint/safetensors.h"
#include "weft/data/tokenizer.h"
#include "weft/kernels/convert.h"
#include "weft/train/checkpointing.h"
#include "weft/train/config.h"
#include "weft/train/hf_llama.h"

namespace {

namespace fs = std::filesystem;
namespace ckpt = weft::checkpoint;

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::uint64_t bytes_of(const ckpt::TensorEntry& t) {
  return static_cast<std::uint64_t>(weft::shape_numel(t.shape)) * weft::dtype_size(t.dtype);
}

void inspect(const std::string& given, bool list) {
  const std::string dir = weft::train::checkpoint_directory(given);
  const ckpt::Manifest m = weft::train::read_manifest(dir);
  std::printf("checkpoint %s (format version %d)\n", dir.c_str(), m.version);
  std::printf("step %lld, optimizer steps %lld, samples drawn %lld, seed %lld, lr %g\n",
              static_cast<long long>(m.step), static_cast<long long>(m.optimizer_steps),
              static_cast<long long>(m.samples_drawn), static_cast<long long>(m.seed), m.lr);
  std::string mesh;
  for (const auto& [name, size] : m.mesh)
    mesh += (mesh.empty() ? "" : " x ") + name + " " + std::to_string(size);
  std::printf("written by %d rank%s%s%s\n", m.world_size, m.world_size == 1 ? "" : "s",
              mesh.empty() ? "" : ", mesh ", mesh.c_str());
  std::uint64_t model = 0, optimizer = 0, files = 0;
  for (const auto& [name, t] : m.tensors)
    (name.rfind("model.", 0) == 0 ? model : optimizer) += bytes_of(t);
  for (const ckpt::FileEntry& f : m.files) files += f.bytes;
  std::printf("%zu tensors: model %.1f MiB, optimizer %.1f MiB; %zu file%s, %.1f MiB\n",
              m.tensors.size(), mib(model), mib(optimizer), m.files.size(),
              m.files.size() == 1 ? "" : "s", mib(files));
  for (const ckpt::FileEntry& f : m.files)
    std::printf("  %s (rank %d): %.1f MiB\n", f.name.c_str(), f.rank, mib(f.bytes));
  if (!list) return;
  for (const auto& [name, t] : m.tensors) {
    std::printf("  %s %s %s, %zu chunk%s\n", name.c_str(), ckpt::dtype_code(t.dtype),
                weft::shape_string(t.shape).c_str(), t.chunks.size(),
                t.chunks.size() == 1 ? "" : "s");
  }
}

// Every file read whole: the chunks tile each tensor once, the files hold exactly the manifest's
// chunks, no value is NaN or infinite, and the tensors are the run's model (and AdamW's
// moments of each parameter, when the checkpoint has any), at its shapes.
void verify_deep(const std::string& dir, const ckpt::Manifest& m) {
  const ckpt::DeepVerification v = ckpt::deep_verify_checkpoint(dir, m);
  const weft::train::Config config =
      weft::train::parse_config(m.config, "the configuration in " + dir + "/manifest.json");
  bool optimizer = false;
  for (const auto& [name, t] : m.tensors) optimizer = optimizer || name.rfind("optim.", 0) == 0;
  weft::train::check_compatible(m, config.model.parameter_shapes(), optimizer, dir);
  std::printf(
      "ok: %s: %lld files, %lld chunks of %lld tensors, %.1f MiB read: every tensor tiled "
      "exactly once by its chunks, every file holds exactly its chunks (name, dtype, box, "
      "bytes), no NaN or infinity; the tensors are the run's model%s\n",
      dir.c_str(), static_cast<long long>(v.files), static_cast<long long>(v.chunks),
      static_cast<long long>(v.tensors), mib(v.bytes),
      optimizer ? " and AdamW's two moments of each parameter" : " (no optimizer state)");
}

void verify(const std::string& given, bool deep) {
  const std::string dir = weft::train::checkpoint_directory(given);
  const ckpt::Manifest m = weft::train::read_manifest(dir);
  if (deep) {
    verify_deep(dir, m);
    return;
  }
  std::size_t chunks = 0;
  for (const auto& [name, t] : m.tensors) chunks += t.chunks.size();
  const std::uint64_t bytes = ckpt::verify_checkpoint(dir, m);
  std::printf("ok: %s: %zu files, %zu chunks of %zu tensors, %.1f MiB verified\n", dir.c_str(),
              m.files.size(), chunks, m.tensors.size(), mib(bytes));
}

// Hugging Face's layout: model.safetensors, or model-0000k-of-0000n.safetensors and
// model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map": {name: file}}).
// What an earlier consolidate into `out` wrote (one file, or shards and their index), so that
// a loader never finds both forms, or shards of two runs: only weft-ckpt's own file names.
void remove_earlier_output(const std::string& out) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(out, ec)) {
    const std::string name = entry.path().filename().string();
    const bool shard = name.starts_with("model-") && name.find("-of-") != std::string::npos &&
                       name.ends_with(".safetensors");
    if (shard || name == "model.safetensors" || name == "model.safetensors.index.json" ||
        name == "config.json") {
      fs::remove(entry.path());
    }
  }
}

struct ConsolidateOptions {
  double max_shard_mb = 5000;
  bool with_optimizer = false;
  std::string names = "hf";  // hf: Hugging Face's names and rotary layout; weft: as saved
  std::string dtype = "float32";
};

// A tensor as consolidate writes it: renamed and its q/k rows permuted for Hugging Face,
// rounded to bf16 when asked.
ckpt::NamedTensor output_tensor(const std::string& tensor, const weft::Tensor& value,
                                const weft::nn::LlamaConfig& model, const ConsolidateOptions& o) {
  // PyTorch's state_dict names for the model; the moments keep their prefix.
  const std::string name = tensor.rfind("model.", 0) == 0 ? tensor.substr(6) : tensor;
  ckpt::NamedTensor out{name, value};
  if (o.names == "hf")
    out = {weft::train::hf_name(name), weft::train::to_hf_layout(name, value, model)};
  if (o.dtype == "bfloat16") {
    weft::Tensor rounded = weft::Tensor::zeros(value.shape(), weft::DType::kBFloat16);
    const weft::Tensor whole = out.tensor.contiguous();
    weft::kernels::to_bfloat16(whole.data<float>(), rounded.data<weft::BFloat16>(), whole.numel());
    out.tensor = rounded;
  }
  return out;
}

// config.json for Hugging Face, with BOS and EOS where the run's tokenizer can be loaded.
void write_hf_config(const std::string& out, const weft::train::Config& config,
                     const std::string& dtype) {
  std::optional<std::int32_t> bos, eos;
  try {
    const auto tok = weft::data::load_tokenizer(config.tokenizer.path, config.tokenizer.encoding);
    bos = tok->bos_id();
    eos = tok->eos_id();
  } catch (const weft::data::TokenizerError&) {
    // Not here (a checkpoint moved to another machine): the ids are optional in config.json.
  }
  const std::string path = (fs::path(out) / "config.json").string();
  ckpt::write_text_file(path, weft::train::hf_config(config.model, dtype, bos, eos).dump(2) + "\n");
  std::printf("wrote %s\n", path.c_str());
}

// The progress line's text while consolidating.
std::string describe_progress(std::uint64_t done, std::uint64_t total, std::int64_t tensors,
                              std::chrono::steady_clock::time_point start) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char text[128];
  std::snprintf(text, sizeof(text), "read %.1f of %.1f MB, %lld tensors, %.0f MB/s",
                static_cast<double>(done) / 1e6, static_cast<double>(total) / 1e6,
                static_cast<long long>(tensors),
                static_cast<double>(done) / 1e6 / std::max(seconds, 1e-9));
  return text;
}

void consolidate(const std::string& given, const std::string& out, const ConsolidateOptions& o) {
  const std::string dir = weft::train::checkpoint_directory(given);
  const ckpt::Manifest m = weft::train::read_manifest(dir);
  if (o.with_optimizer && o.names == "hf") {
    throw weft::InvalidArgument(
        "AdamW's moments have no Hugging Face names: give --names weft with --optimizer");
  }
  const weft::train::Config config =
      weft::train::parse_config(m.config, "the configuration in " + dir + "/manifest.json");
  const double max_shard_mb = o.max_shard_mb;
  const bool with_optimizer = o.with_optimizer;
  // The tensors, grouped into files of at most max_shard_mb (a larger tensor alone).
  std::vector<std::vector<std::string>> groups(1);
  std::uint64_t in_group = 0, total = 0;
  const auto limit = static_cast<std::uint64_t>(max_shard_mb * (1 << 20));
  for (const auto& [name, t] : m.tensors) {
    if (!with_optimizer && name.rfind("model.", 0) != 0) continue;
    if (in_group > 0 && in_group + bytes_of(t) > limit) {
      groups.emplace_back();
      in_group = 0;
    }
    groups.back().push_back(name);
    in_group += bytes_of(t);
    total += bytes_of(t);
  }
  ckpt::make_directories(out);
  remove_earlier_output(out);
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  weft::tools::ProgressLine progress;
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t done = 0;
  std::int64_t tensors_done = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    char name[64];
    if (groups.size() == 1) {
      std::snprintf(name, sizeof(name), "model.safetensors");
    } else {
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", g + 1, groups.size());
    }
    std::vector<ckpt::NamedTensor> named;
    for (const std::string& tensor : groups[g]) {  // one at a time, for the progress line
      const weft::Shape& shape = m.tensors.at(tensor).shape;
      const weft::Tensor value = weft::train::read_pieces(
          dir, m, {{tensor, shape, std::vector<std::int64_t>(shape.size()), shape}})[0];
      named.push_back(output_tensor(tensor, value, config.model, o));
      weight_map[named.back().name] = name;
      done += bytes_of(m.tensors.at(tensor));
      progress.update(static_cast<double>(done), static_cast<double>(total),
                      describe_progress(done, total, ++tensors_done, start));
    }
    ckpt::save_safetensors((fs::path(out) / name).string(), named,
                           {{"format", "pt"}, {"step", std::to_string(m.step)}});
    progress.finish();
    std::printf("wrote %s (%zu tensors)\n", (fs::path(out) / name).c_str(), named.size());
  }
  if (groups.size() > 1) {
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                          {"weight_map", weight_map}};
    const std::string path = (fs::path(out) / "model.safetensors.index.json").string();
    ckpt::write_text_file(path, index.dump(2) + "\n");
    std::printf("wrote %s\n", path.c_str());
  }
  if (o.names == "hf") write_hf_config(out, config, o.dtype);
}

std::int64_t metadata_int(const ckpt::SafetensorsFile& file, const std::string& key,
                          const std::string& path) {
  const auto it = file.metadata.find(key);
  try {
    if (it != file.metadata.end()) return std::stoll(it->second);
  } catch (const std::exception&) {
  }
  throw ckpt::CheckpointError(path + ": metadata '" + key + "' is missing or not a number");
}

// The single-file format weft-train wrote before distributed checkpoints
// (step-<N>/checkpoint.safetensors, metadata format "weft-train-checkpoint/1").
void convert(const std::string& old, const std::string& folder, int data_parallel) {
  const ckpt::SafetensorsFile file = ckpt::load_safetensors(old);
  const auto format = file.metadata.find("format");
  if (format == file.metadata.end() || format->second != "weft-train-checkpoint/1")
    throw ckpt::CheckpointError(old +
                                " is not a single-file weft-train checkpoint (format "
                                "weft-train-checkpoint/1)");
  ckpt::Manifest m;
  m.step = metadata_int(file, "step", old);
  m.optimizer_steps = metadata_int(file, "optimizer_steps", old);
  m.config = file.metadata.count("config") ? file.metadata.at("config") : "";
  const weft::train::Config config =
      weft::train::parse_config(m.config, "the configuration in " + old);
  m.seed = config.training.seed;
  m.lr = config.lr_scheduler.at(m.step > 0 ? m.step - 1 : 0);
  // The old loader counted its batches; the cursor counts the sequences of every rank.
  const auto& p = config.parallelism;
  if (data_parallel <= 0) {
    if (p.data_parallel_replicate_degree < 1) {
      throw weft::InvalidArgument(
          old +
          " was trained with data_parallel_replicate_degree = -1 (the world size divided by "
          "the other degrees), which the file does not record: give --data-parallel, the "
          "run's data-parallel degree");
    }
    data_parallel =
        static_cast<int>(p.data_parallel_replicate_degree * p.data_parallel_shard_degree);
  }
  m.samples_drawn =
      metadata_int(file, "loader_batches", old) * config.training.batch_size * data_parallel;
  std::vector<ckpt::PieceData> tensors;
  for (const ckpt::NamedTensor& t : file.tensors) {
    tensors.push_back(
        {t.name, {std::vector<std::int64_t>(t.tensor.shape().size()), t.tensor.shape()}, t.tensor});
  }
  std::printf("wrote %s\n", weft::train::save_whole_checkpoint(folder, m, tensors).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "weft-ckpt: inspects, verifies, consolidates and converts weft-train's distributed "
      "checkpoints (docs/CHECKPOINTS.md)",
      "weft-ckpt");
  app.option_defaults()->always_capture_default();
  app.require_subcommand(1);
  std::string checkpoint, out, old;
  bool list = false;
  ConsolidateOptions consolidating;
  int data_parallel = 0;
  auto* inspect_cmd = app.add_subcommand("inspect", "step, mesh, files and sizes of a checkpoint");
  inspect_cmd->add_option("checkpoint", checkpoint, "step directory, or folder (its newest)")
      ->required();
  inspect_cmd->add_flag("--tensors", list, "list every tensor with its shape and chunks");
  auto* verify_cmd = app.add_subcommand("verify", "reads every file and checks every checksum");
  bool deep = false;
  verify_cmd->add_flag("--deep", deep,
                       "also prove that the files hold exactly the manifest's chunks, tiling "
                       "every tensor once, finite, and that the tensors are the run's model's");
  verify_cmd->add_option("checkpoint", checkpoint, "step directory, or folder (its newest)")
      ->required();
  auto* consolidate_cmd = app.add_subcommand(
      "consolidate",
      "the whole model as Hugging Face's Llama: config.json and safetensors (one file, or "
      "shards with model.safetensors.index.json)");
  consolidate_cmd->add_option("checkpoint", checkpoint, "step directory, or folder (its newest)")
      ->required();
  consolidate_cmd->add_option("out", out, "the folder to write into")->required();
  consolidate_cmd->add_option("--max-shard-mb", consolidating.max_shard_mb, "largest file, in MiB")
      ->check(CLI::Range(0.001, 1e9));
  consolidate_cmd
      ->add_option("--names", consolidating.names,
                   "hf: Hugging Face's names and rotary layout, and config.json; weft: "
                   "weft's names and layout, as saved")
      ->check(CLI::IsMember({"hf", "weft"}));
  consolidate_cmd->add_option("--dtype", consolidating.dtype, "the weights' dtype in the files")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  consolidate_cmd->add_flag("--optimizer", consolidating.with_optimizer,
                            "AdamW's moments too (with --names weft)");
  auto* convert_cmd = app.add_subcommand(
      "convert", "a single-file checkpoint (weft-train before distributed checkpoints) into one");
  convert_cmd->add_option("file", old, "its checkpoint.safetensors")->required();
  convert_cmd->add_option("folder", out, "the checkpoint folder to write step-<N>/ into")
      ->required();
  convert_cmd
      ->add_option("--data-parallel", data_parallel,
                   "the run's data-parallel degree, when its configuration leaves it to the "
                   "world size; 0: from the configuration")
      ->check(CLI::Range(0, 1 << 20));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help, or a usage error (CLI11's own codes are 100+)
  }
  try {
    if (*inspect_cmd) inspect(checkpoint, list);
    if (*verify_cmd) verify(checkpoint, deep);
    if (*consolidate_cmd) consolidate(checkpoint, out, consolidating);
    if (*convert_cmd) convert(old, out, data_parallel);
  } catch (const weft::InvalidArgument& e) {
    std::fprintf(stderr, "weft-ckpt: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft-ckpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
