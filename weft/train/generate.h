// Sampling text from a trained model with a KV cache (weft-generate).
#pragma once

#include <cstdint>
#include <string>

#include "weft/data/tokenizer.h"
#include "weft/nn/llama.h"

namespace weft::train {

struct SamplingOptions {
  std::int64_t max_new_tokens = 200;
  double temperature = 0.8;  // 0: always the most likely token
  std::int64_t top_k = 0;    // 0: the whole vocabulary
  std::uint64_t seed = 0;
};

// The prompt followed by what the model writes after it, a token at a time, through the
// run's tokenizer: the prompt is BOS (where the tokenizer has one) and its tokens; writing
// stops at EOS, after max_new_tokens, or at the model's max_seq_len; the prompt's tokens and
// the new ones are decoded together. Throws InvalidArgument for an empty prompt or one longer
// than max_seq_len.
std::string generate(nn::Llama& model, const data::Tokenizer& tokenizer, const std::string& prompt,
                     const SamplingOptions& options);

}  // namespace weft::train
