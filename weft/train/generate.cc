#include "weft/train/generate.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "weft/base/error.h"
#include "weft/tensor/random.h"
#include "weft/train/data.h"

namespace weft::train {
namespace {

// Draws a token from softmax(logits / temperature) restricted to the top_k largest logits,
// with uniform number u in [0, 1).
std::int32_t sample(const float* logits, std::int64_t vocab, const SamplingOptions& o, double u) {
  std::vector<std::int32_t> order(static_cast<std::size_t>(vocab));
  for (std::int32_t i = 0; i < vocab; ++i) order[static_cast<std::size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
  if (o.temperature <= 0) return order[0];
  const auto k = static_cast<std::size_t>(o.top_k > 0 ? std::min(o.top_k, vocab) : vocab);
  std::vector<double> p(k);
  double sum = 0;
  for (std::size_t i = 0; i < k; ++i) {
    sum += p[i] = std::exp((logits[order[i]] - logits[order[0]]) / o.temperature);
  }
  double acc = 0;
  for (std::size_t i = 0; i < k; ++i) {
    acc += p[i] / sum;
    if (u < acc) return order[i];
  }
  return order[k - 1];
}

}  // namespace

std::string generate(nn::Llama& model, const data::Tokenizer& tokenizer, const std::string& prompt,
                     const SamplingOptions& options) {
  std::vector<std::int32_t> tokens;
  if (auto bos = tokenizer.bos_id()) tokens.push_back(*bos);
  tokenizer.encode(prompt, tokens);
  const std::int64_t max_len = model.config().max_seq_len;
  if (prompt.empty() || static_cast<std::int64_t>(tokens.size()) > max_len) {
    throw InvalidArgument("generate: the prompt must have 1 to " + std::to_string(max_len) +
                          " tokens (the model's max_seq_len), it has " +
                          std::to_string(tokens.size()));
  }
  const std::optional<std::int32_t> eos = tokenizer.eos_id();
  nn::KVCache cache = model.make_cache();
  const float* logits =
      model.forward_cached(tokens.data(), static_cast<std::int64_t>(tokens.size()), cache);
  std::vector<std::int32_t> out;
  const PhiloxKey key = philox_key(options.seed, "sample");
  for (std::int64_t i = 0; i < options.max_new_tokens; ++i) {
    const std::int32_t next = sample(logits, model.config().vocab_size, options,
                                     philox_uniform(key, static_cast<std::uint64_t>(i)));
    if (next == eos) break;
    out.push_back(next);
    if (cache.length >= max_len) break;
    logits = model.forward_cached(&next, 1, cache);
  }
  // Decoded with the prompt's tokens, not after its text: SentencePiece drops the space that
  // starts a decoded sequence ("_why" alone decodes to "why"), which the prompt's context keeps.
  std::vector<std::int32_t> text(tokens.begin() + (tokenizer.bos_id() ? 1 : 0), tokens.end());
  text.insert(text.end(), out.begin(), out.end());
  return tokenizer.decode(text);
}

}  // namespace weft::train
