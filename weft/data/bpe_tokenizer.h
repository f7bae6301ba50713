// Byte-level BPE, as GPT-2, GPT-4 (tiktoken) and Llama 3 tokenize: the text is split into
// pieces by a regular expression (PCRE2, Unicode classes), each piece's UTF-8 bytes start as
// one token each, and adjacent pairs merge, lowest merge rank first (leftmost among equal
// ranks), until no pair has a merge; a piece that is itself a token is that token
// (tiktoken's rule, and Hugging Face's with "ignore_merges", which Llama 3 sets).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weft/data/tokenizer.h"

namespace weft::data {

namespace internal {
class MergeTable;
class PieceSplitter;
}  // namespace internal

class BpeTokenizer final : public Tokenizer {
 public:
  // Hugging Face's tokenizer.json with model "BPE", a ByteLevel pre-tokenizer (alone, or after
  // a Split by regex) and decoder, and no normalizer. Throws TokenizerError naming the file
  // and what in it weft does not read.
  static std::unique_ptr<BpeTokenizer> from_tokenizer_json(const std::string& path);
  // A tiktoken rank file (base64 bytes and rank per line) with the pattern and special
  // tokens of `encoding` (load_tokenizer() says which; empty: picked by the rank count).
  static std::unique_ptr<BpeTokenizer> from_tiktoken(const std::string& path,
                                                     const std::string& encoding);
  ~BpeTokenizer() override;

  using Tokenizer::encode;
  void encode(std::string_view text, std::vector<std::int32_t>& out,
              Specials specials = Specials::kAsText) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(tokens_.size()); }
  std::optional<std::int32_t> bos_id() const override { return bos_; }
  std::optional<std::int32_t> eos_id() const override { return eos_; }
  std::optional<std::int32_t> special_id(std::string_view text) const override;
  std::string describe() const override { return description_; }

 private:
  enum class Kind : std::uint8_t { kNone, kOrdinary, kSpecial };  // kNone: an unused id

  BpeTokenizer();
  void add_special(std::int32_t id, std::string text, const std::string& path);
  // The vocabulary is complete: index it, and check that every byte is a token.
  void index(const std::string& path);
  std::optional<std::int32_t> first_special(std::initializer_list<std::string_view> names) const;
  void encode_ordinary(std::string_view text, std::vector<std::int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const;

  std::vector<std::string> tokens_;  // id -> bytes (special tokens: their text)
  std::vector<Kind> kinds_;
  std::unordered_map<std::string_view, std::int32_t> ids_;       // bytes -> id, ordinary
  std::unordered_map<std::string_view, std::int32_t> specials_;  // text -> id
  std::int32_t byte_ids_[256] = {};
  std::unique_ptr<internal::MergeTable> merges_;
  std::unique_ptr<internal::PieceSplitter> splitter_;
  bool whole_piece_first_ = true;  // a piece that is a token is that token
  std::optional<std::int32_t> bos_, eos_;
  std::string description_;
  std::size_t longest_special_ = 0;
  bool special_starts_[256] = {};  // the first bytes of special tokens
};

}  // namespace weft::data
