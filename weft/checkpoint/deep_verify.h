// `weft-ckpt verify --deep`: proves a checkpoint's files hold exactly what its manifest says,
// the class of bug where sharded state is silently padded, dropped or put in another's place
// (each chunk's bytes can match their checksum and still be the wrong tensor's).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/checkpoint/manifest.h"

namespace weft::checkpoint {

struct DeepVerification {
  std::int64_t files = 0, tensors = 0, chunks = 0;
  std::uint64_t bytes = 0;  // read
};

// Reads every file of the checkpoint in `dir` whole and checks, beyond verify_checkpoint:
//  - every tensor of the manifest is tiled exactly once by its chunks (disjoint boxes inside
//    the tensor whose elements add up to its size);
//  - every file holds exactly the chunks the manifest gives it, nothing else: at each
//    chunk's bytes, the file's own header names that tensor, with the manifest's dtype, the
//    chunk's box as its shape and as its "slice." metadata, and the bytes match the chunk's
//    checksum;
//  - no floating-point element is NaN or infinite.
// CheckpointError naming the file, tensor and box at the first thing wrong.
DeepVerification deep_verify_checkpoint(const std::string& dir, const Manifest& manifest);

}  // namespace weft::checkpoint
