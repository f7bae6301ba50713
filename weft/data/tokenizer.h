// Tokenizers behind one interface: text to token ids and back.
//
//   auto tok = weft::data::load_tokenizer("tokenizer.json");   // or a .model, a .tiktoken, "bytes"
//   std::vector<std::int32_t> ids = tok->encode("Hello world!");
//   std::string text = tok->decode(ids);
//
// Four kinds (docs/DATA.md): "bytes" (token = byte, 256 tokens); SentencePiece models
// (.model, through libsentencepiece); byte-level BPE in Hugging Face's tokenizer.json (GPT-2,
// Llama 3) and in tiktoken's rank files (Llama 3's original tokenizer.model, cl100k_base,
// o200k_base, r50k_base). Encoding is lossless: decode(encode(t)) == t for every byte
// string t (SentencePiece: for text its normalizer leaves as it is, with byte fallback).
// A tokenizer is immutable once loaded: encode and decode may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/base/error.h"

namespace weft::data {

// A tokenizer file that cannot be used (missing, malformed, or a form weft does not
// implement), or an id outside the vocabulary: what() names the file or the id.
class TokenizerError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// Whether special tokens' text in the input ("<|eot_id|>", "<|endoftext|>") becomes the
// special token (kParse: chat templates) or is encoded as the ordinary text it is
// (kAsText: documents of a corpus, which may quote such strings).
enum class Specials { kAsText, kParse };

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Appends the ids of `text` to `out`; adds no BOS or EOS (the data pipeline does).
  virtual void encode(std::string_view text, std::vector<std::int32_t>& out,
                      Specials specials = Specials::kAsText) const = 0;
  std::vector<std::int32_t> encode(std::string_view text,
                                   Specials specials = Specials::kAsText) const;
  // The text of `ids`, special tokens as their text. Throws TokenizerError for an id outside
  // 0 .. vocab_size() - 1.
  virtual std::string decode(std::span<const std::int32_t> ids) const = 0;
  // Ids are 0 .. vocab_size() - 1 (special tokens included).
  virtual std::int32_t vocab_size() const = 0;
  virtual std::optional<std::int32_t> bos_id() const = 0;  // beginning of a document
  virtual std::optional<std::int32_t> eos_id() const = 0;  // end of a document
  // The id of a special token by its text ("<|eot_id|>"), if the vocabulary has it.
  virtual std::optional<std::int32_t> special_id(std::string_view text) const = 0;
  // One line for logs: the kind, the file and the vocabulary size.
  virtual std::string describe() const = 0;
};

// "bytes", or a file: tokenizer.json (*.json), a SentencePiece model, or a tiktoken rank file
// (base64 token and rank per line, as *.tiktoken and Llama 3's tokenizer.model are). A rank
// file does not name its pre-tokenizer pattern and special tokens: `encoding` does
// ("llama3", "cl100k_base", "o200k_base", "r50k_base"); empty picks it from the number of
// ranks (128,000: llama3; 100,256: cl100k_base; 199,998: o200k_base; 50,256: r50k_base).
// Throws TokenizerError.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec,
                                          const std::string& encoding = "");

// Token = byte: the byte-level models weft trains by default.
class ByteTokenizer final : public Tokenizer {
 public:
  using Tokenizer::encode;
  void encode(std::string_view text, std::vector<std::int32_t>& out,
              Specials specials = Specials::kAsText) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int32_t vocab_size() const override { return 256; }
  std::optional<std::int32_t> bos_id() const override { return std::nullopt; }
  std::optional<std::int32_t> eos_id() const override { return std::nullopt; }
  std::optional<std::int32_t> special_id(std::string_view) const override { return std::nullopt; }
  std::string describe() const override { return "bytes (256 tokens: token = byte)"; }
};

}  // namespace weft::data
