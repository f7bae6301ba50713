// A configuration's model and mesh described without building either: parameter count and
// shapes, FLOP per token, the layout's degrees and rank count (weft-train --describe). For
// models of any size (Llama 3 405B): nothing is allocated.
#pragma once

#include <string>

#include "weft/train/config.h"

namespace weft::train {

// Throws ConfigError when model.vocab_size is 0 and the tokenizer cannot be loaded.
std::string describe(const Config& config);

}  // namespace weft::train
