#include "weft/data/tokenizer.h"

#include <filesystem>
#include <fstream>

#include "weft/data/bpe_tokenizer.h"
#include "weft/data/internal/text_file.h"
#include "weft/data/internal/tiktoken_encodings.h"
#include "weft/data/sentencepiece_tokenizer.h"

namespace weft::data {

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, Specials specials) const {
  std::vector<std::int32_t> ids;
  encode(text, ids, specials);
  return ids;
}

void ByteTokenizer::encode(std::string_view text, std::vector<std::int32_t>& out, Specials) const {
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
}

std::string ByteTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (std::int32_t id : ids) {
    if (id < 0 || id > 255) {
      throw TokenizerError("token id " + std::to_string(id) +
                           " is not a byte (the byte tokenizer's ids are 0-255)");
    }
    text.push_back(static_cast<char>(id));
  }
  return text;
}

namespace {

// The first bytes of a file, to tell a tiktoken rank file (text) from a SentencePiece model.
std::string head_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(256, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return head;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec, const std::string& encoding) {
  if (spec == "bytes" || spec.empty()) return std::make_unique<ByteTokenizer>();
  std::error_code ec;
  if (!std::filesystem::exists(spec, ec)) {
    throw TokenizerError("the tokenizer " + spec +
                         " does not exist: give a tokenizer.json, a SentencePiece .model, a "
                         "tiktoken rank file, or \"bytes\"");
  }
  if (std::filesystem::is_directory(spec, ec)) {
    const auto json = std::filesystem::path(spec) / "tokenizer.json";
    if (std::filesystem::exists(json, ec)) return BpeTokenizer::from_tokenizer_json(json);
    throw TokenizerError("the folder " + spec + " has no tokenizer.json");
  }
  if (std::filesystem::path(spec).extension() == ".json") {
    return BpeTokenizer::from_tokenizer_json(spec);
  }
  if (internal::looks_like_tiktoken(head_of(spec))) {
    return BpeTokenizer::from_tiktoken(spec, encoding);
  }
  return std::make_unique<SentencePieceTokenizer>(spec);
}

}  // namespace weft::data
