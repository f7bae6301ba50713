// The manifest of a distributed checkpoint (manifest.json in its directory): for every tensor
// of the training state its whole shape and dtype and the chunks that hold it (which file,
// which bytes, which box of the tensor, and their checksum), every file's size and header
// checksum, and the training state that is not a tensor (step, optimizer steps, data cursor),
// the mesh it was written from and the configuration. The format: docs/CHECKPOINTS.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weft/base/dtype.h"
#include "weft/checkpoint/safetensors.h"
#include "weft/tensor/tensor.h"

namespace weft::checkpoint {

// A checkpoint that is intact but does not fit what loads it (another model, a tensor of
// another shape): falling back to an older checkpoint of the same run would not help.
class IncompatibleCheckpoint : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// Version 2 adds the manifest's own checksum; version 1 (without) is still read.
inline constexpr int kManifestVersion = 2;
inline constexpr char kManifestName[] = "manifest.json";

// A box of a tensor: elements offsets[d] <= i[d] < offsets[d] + sizes[d] in every dimension.
struct Box {
  std::vector<std::int64_t> offsets, sizes;
  std::int64_t numel() const { return shape_numel(sizes); }
  friend bool operator==(const Box&, const Box&) = default;
};
// The common part of two boxes of one tensor, sizes all zero when they do not meet.
Box intersect(const Box& a, const Box& b);
std::string box_string(const Box& box);  // "[0:128, 64:128]"

struct ChunkEntry {
  Box box;
  int file = 0;                      // index into Manifest::files
  std::uint64_t begin = 0, end = 0;  // bytes of the file (from its start), row-major box
  std::uint64_t checksum = 0;        // of those bytes
};

struct TensorEntry {
  DType dtype = DType::kFloat32;
  Shape shape;  // of the whole tensor
  std::vector<ChunkEntry> chunks;
};

struct FileEntry {
  std::string name;  // in the checkpoint's directory: "rank-00001.safetensors"
  int rank = 0;      // that wrote it
  std::uint64_t bytes = 0;
  std::uint64_t header_bytes = 0;     // the safetensors length prefix and header
  std::uint64_t header_checksum = 0;  // of those bytes
};

struct Manifest {
  int version = kManifestVersion;
  std::int64_t step = 0;             // training steps completed
  std::int64_t optimizer_steps = 0;  // AdamW's step count (bias correction)
  std::int64_t samples_drawn = 0;    // the training data cursor, in sequences, over all ranks
  std::int64_t seed = 0;             // training.seed: the data order's (with the cursor)
  double lr = 0;                     // the learning rate of the last step (for the reader)
  int world_size = 1;
  std::vector<std::pair<std::string, int>> mesh;  // [name, size], TorchTitan's order
  std::string config;                             // the run's configuration, TOML
  std::vector<FileEntry> files;
  std::map<std::string, TensorEntry> tensors;
};

// CheckpointError naming `path` unless the chunks of `t` cover it exactly once: disjoint boxes
// whose elements add up to its size (parse_manifest checks every tensor so).
void check_partition(const TensorEntry& t, const std::string& name, const std::string& path);

std::string to_json(const Manifest& manifest);
// Parses and checks a manifest: every field present with its type and range, every chunk
// inside its tensor and its file, the chunks of each tensor covering it exactly once.
// CheckpointError naming `path` and the first thing wrong otherwise.
Manifest parse_manifest(const std::string& text, const std::string& path);

}  // namespace weft::checkpoint
