// Which rank writes which piece of a distributed checkpoint, and which bytes each rank reads
// back under whatever mesh it runs with now: the two plans of docs/CHECKPOINTS.md, pure
// functions, tested on their own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/checkpoint/manifest.h"

namespace weft::checkpoint {

// A piece of a tensor some rank holds.
struct HeldPiece {
  std::string tensor;  // "model.layers.0.attention.wq.weight"
  Box box;             // its place in the whole tensor
};

// For every rank's pieces (`held[r]`), whether rank r writes it: each distinct (tensor, box)
// is written by exactly one of the ranks that hold it (replicas: DDP, the tensor-parallel
// ranks' copies of an unsplit parameter), the one with the fewest bytes to write so far,
// taking the largest pieces first, so replicas share the writing. Every rank computes the
// same plan from the same input. InvalidArgument when two pieces of a tensor overlap without
// being equal, or a rank holds the same piece twice.
std::vector<std::vector<bool>> plan_writes(const std::vector<std::vector<HeldPiece>>& held,
                                           std::int64_t element_bytes);

// A piece this rank needs: `box` of tensor `tensor`.
struct Target {
  std::string tensor;
  Box box;
};

// A read: `region` (in the whole tensor's coordinates) of chunk `chunk` of the target's
// tensor, which lands in target `target`.
struct Read {
  std::size_t target;
  std::size_t chunk;  // index into manifest.tensors.at(targets[target].tensor).chunks
  Box region;
};

// The reads that fill every target from the chunks `manifest` lists: every element of every
// target comes from exactly one read (the manifest's chunks partition each tensor, as
// parse_manifest checks). Incompatible (naming the tensor) when a target's tensor is not in
// the checkpoint or its box lies outside the tensor's saved shape.
std::vector<Read> plan_reads(const Manifest& manifest, const std::vector<Target>& targets);

}  // namespace weft::checkpoint
