#include "weft/data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <thread>
#include <unordered_map>

namespace weft::data {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path)
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()), path_(path) {
  const auto status = processor_->Load(path);
  if (!status.ok()) {
    throw TokenizerError(path + " is not a SentencePiece model: " + status.ToString());
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

void SentencePieceTokenizer::encode(std::string_view text, std::vector<std::int32_t>& out,
                                    Specials) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  if (!status.ok()) throw TokenizerError(path_ + ": encoding failed: " + status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(std::span<const std::int32_t> ids) const {
  const std::int32_t n = vocab_size();
  for (std::int32_t id : ids) {
    if (id < 0 || id >= n) {
      throw TokenizerError("token id " + std::to_string(id) + " is not in the vocabulary (" +
                           describe() + ")");
    }
  }
  std::string text;
  const auto status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) throw TokenizerError(path_ + ": decoding failed: " + status.ToString());
  return text;
}

std::int32_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

std::optional<std::int32_t> SentencePieceTokenizer::bos_id() const {
  const int id = processor_->bos_id();
  return id < 0 ? std::nullopt : std::optional<std::int32_t>(id);
}

std::optional<std::int32_t> SentencePieceTokenizer::eos_id() const {
  const int id = processor_->eos_id();
  return id < 0 ? std::nullopt : std::optional<std::int32_t>(id);
}

std::optional<std::int32_t> SentencePieceTokenizer::special_id(std::string_view text) const {
  const int id = processor_->PieceToId(text);
  if (id == processor_->unk_id() && text != processor_->IdToPiece(id)) return std::nullopt;
  return id;
}

std::string SentencePieceTokenizer::describe() const {
  return "SentencePiece " + path_ + " (" + std::to_string(vocab_size()) + " tokens)";
}

void train_sentencepiece(const SentencePieceTraining& o) {
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  const std::unordered_map<std::string, std::string> args = {
      {"input", o.input},
      {"model_prefix", o.model_prefix},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"input_sentence_size", std::to_string(o.input_sentence_size)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(o.threads > 0 ? static_cast<unsigned>(o.threads) : cpus)},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      // Lossless, as Llama's models are: text kept as it is (no NFKC, no whitespace
      // collapsing), whitespace-only pieces allowed, digits one token each.
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"minloglevel", "1"},
  };
  const auto status = sentencepiece::SentencePieceTrainer::Train(args);
  if (!status.ok()) {
    throw TokenizerError("training a SentencePiece model on " + o.input +
                         " failed: " + status.ToString());
  }
}

}  // namespace weft::data
