// SentencePiece models (Llama 1 and 2, T5, and those weft-tokenizer trains), through
// Debian's libsentencepiece.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "weft/data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace weft::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Throws TokenizerError when `path` is not a SentencePiece model.
  explicit SentencePieceTokenizer(const std::string& path);
  ~SentencePieceTokenizer() override;

  using Tokenizer::encode;
  // SentencePiece matches its user-defined symbols in the text either way; its control
  // symbols (BOS, EOS) never come from text.
  void encode(std::string_view text, std::vector<std::int32_t>& out,
              Specials specials = Specials::kAsText) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int32_t vocab_size() const override;
  std::optional<std::int32_t> bos_id() const override;
  std::optional<std::int32_t> eos_id() const override;
  std::optional<std::int32_t> special_id(std::string_view text) const override;
  std::string describe() const override;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::string path_;
};

struct SentencePieceTraining {
  std::string input;         // a text file, one sentence (or document line) per line
  std::string model_prefix;  // writes <prefix>.model and <prefix>.vocab
  std::int32_t vocab_size = 8000;
  std::string model_type = "bpe";  // bpe, unigram, char or word
  double character_coverage = 0.9995;
  bool byte_fallback = true;  // bytes outside the vocabulary become byte tokens: lossless
  std::int64_t input_sentence_size = 2'000'000;  // lines sampled from the input; 0: all
  int threads = 0;                               // 0: every CPU
};

// Trains a model with SentencePiece's trainer, set up as Llama's were: text kept as it is (no
// normalization), digits split, byte fallback; UNK is id 0, BOS 1, EOS 2, no padding.
// Throws TokenizerError with SentencePiece's message when it fails.
void train_sentencepiece(const SentencePieceTraining& options);

}  // namespace weft::data
