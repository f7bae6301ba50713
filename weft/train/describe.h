// A configuration's model and mesh described without building either: parameter count and
// shapes, FLOP per token, the layout's degrees and rank count (weft-train --describe). For
// models of any size (Llama 3 405B): nothing is allocated.
#pragma once

#include <string>

#include "weft/train/config.h"

namespace weft::train {

// Throws ConfigError when model.vocab_size is 0 and the tokenizer cannot be loaded.
std::string describe(const Config& config);
// Its first two lines, the model and the mesh; with world_size > 0 the mesh of a job of that
// many ranks (data_parallel_replicate_degree -1 taking the rest), else of the degrees alone.
std::string describe_job(const Config& config, int world_size);

}  // namespace weft::train
