// One rank's file of a distributed checkpoint: a safetensors file of the pieces it writes (each
// under its tensor's name, its box in the metadata as "slice.<name>": "[0:128, 0:64]"), so any
// safetensors reader opens it; and the reads that fill a rank's pieces back from such files,
// each chunk checked against the manifest's checksum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/checkpoint/manifest.h"
#include "weft/checkpoint/plan.h"
#include "weft/tensor/tensor.h"

namespace weft::checkpoint {

struct PieceData {
  std::string tensor;
  Box box;
  Tensor data;  // contiguous, shape box.sizes
};

// Where each piece went, for the manifest.
struct WrittenFile {
  std::uint64_t bytes = 0, header_bytes = 0, header_checksum = 0;
  std::vector<ChunkEntry> chunks;  // per piece, in order (file index left 0)
};

// Creates `path` (it must not exist) with `pieces`, synced to disk and closed (checked).
// SystemError naming the path when the disk is full or the folder read-only.
WrittenFile write_shard_file(const std::string& path, const std::vector<PieceData>& pieces,
                             const Metadata& metadata);

// Fills `into[t]` (contiguous, shape targets[t].box.sizes) by `reads` (plan_reads) from the
// files of the checkpoint in `dir`: each file's size and header checked against the manifest,
// each chunk read once and its checksum verified before any of it is used. CheckpointError
// naming the file and what is wrong (missing, cut short, checksum mismatch). Returns the
// bytes read.
std::uint64_t execute_reads(const std::string& dir, const Manifest& manifest,
                            const std::vector<Target>& targets, const std::vector<Read>& reads,
                            std::vector<Tensor>& into);

// Reads every file and chunk of the checkpoint in `dir` and checks each against the manifest
// (sizes, header checksums, chunk checksums): what `weft-ckpt verify` runs. CheckpointError
// at the first damage. Returns the bytes verified.
std::uint64_t verify_checkpoint(const std::string& dir, const Manifest& manifest);

}  // namespace weft::checkpoint
