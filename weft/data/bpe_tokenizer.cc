#include "weft/data/bpe_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "weft/data/internal/bpe_merges.h"
#include "weft/data/internal/piece_splitter.h"
#include "weft/data/internal/text_file.h"
#include "weft/data/internal/tiktoken_encodings.h"

namespace weft::data {

using internal::Merge;
using internal::MergeTable;
using internal::PieceSplitter;

namespace {

// GPT-2's pattern: the ByteLevel pre-tokenizer's own when it splits ("use_regex": true).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Hugging Face's ByteLevel alphabet: each byte is a printable code point (GPT-2's
// bytes_to_unicode): the printable Latin-1 bytes stand for themselves, the others for 256,
// 257, ... in byte order. Returns the byte each code point stands for, -1 for others.
std::vector<int> byte_of_code_point() {
  std::vector<int> byte_of(512, -1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    byte_of[static_cast<std::size_t>(printable ? b : next++)] = b;
  }
  return byte_of;
}

// A token of tokenizer.json's vocabulary (UTF-8 of ByteLevel code points) as its bytes.
std::optional<std::string> token_bytes(std::string_view text, const std::vector<int>& byte_of) {
  std::string bytes;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::uint32_t cp = 0;
    int len = 1;
    if (c < 0x80) {
      cp = c;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < text.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
      len = 2;
    } else {
      return std::nullopt;  // the alphabet ends at U+0143: two bytes of UTF-8 at most
    }
    if (cp >= byte_of.size() || byte_of[cp] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(byte_of[cp]));
    i += static_cast<std::size_t>(len);
  }
  return bytes;
}

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw TokenizerError(path + ": " + what);
}

const nlohmann::json& member(const nlohmann::json& j, const char* key, const std::string& path,
                             const std::string& where) {
  if (!j.is_object() || !j.contains(key)) refuse(path, where + " has no \"" + key + "\"");
  return j.at(key);
}

// The pre-tokenizer's pattern, from a ByteLevel alone or a Split by regex then a ByteLevel.
std::string pre_tokenizer_pattern(const nlohmann::json& pre, const std::string& path) {
  auto byte_level_ok = [&](const nlohmann::json& b) {
    if (b.value("add_prefix_space", false)) {
      refuse(path, "the ByteLevel pre-tokenizer adds a prefix space, which weft does not");
    }
  };
  const std::string type = pre.is_object() ? pre.value("type", "") : "";
  if (type == "ByteLevel") {
    byte_level_ok(pre);
    if (!pre.value("use_regex", true)) refuse(path, "a ByteLevel pre-tokenizer without a regex");
    return kGpt2Pattern;
  }
  if (type == "Sequence") {
    const auto& steps = member(pre, "pretokenizers", path, "the pre-tokenizer");
    if (steps.size() == 2 && steps[0].value("type", "") == "Split" &&
        steps[1].value("type", "") == "ByteLevel" && !steps[1].value("use_regex", true)) {
      const auto& split = steps[0];
      byte_level_ok(steps[1]);
      if (split.value("behavior", "") != "Isolated" || split.value("invert", false) ||
          !split.contains("pattern") || !split["pattern"].contains("Regex")) {
        refuse(path, "the Split pre-tokenizer must isolate the matches of a Regex");
      }
      return split["pattern"]["Regex"].get<std::string>();
    }
  }
  refuse(path,
         "the pre-tokenizer is not one weft reads (a ByteLevel, or a Split by regex then "
         "a ByteLevel without one): " +
             pre.dump().substr(0, 200));
}

std::pair<std::string, std::string> merge_pair(const nlohmann::json& m, const std::string& path,
                                               std::size_t rank) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const auto space = s.find(' ');
    if (space != std::string::npos && s.find(' ', space + 1) == std::string::npos) {
      return {s.substr(0, space), s.substr(space + 1)};
    }
  } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return {m[0].get<std::string>(), m[1].get<std::string>()};
  }
  refuse(path, "merge " + std::to_string(rank) + " is not a pair of tokens: " + m.dump());
}

}  // namespace

BpeTokenizer::BpeTokenizer() : merges_(std::make_unique<MergeTable>()) {}
BpeTokenizer::~BpeTokenizer() = default;

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_tokenizer_json(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(internal::read_text_file(path, "tokenizer"));
  } catch (const nlohmann::json::exception& e) {
    refuse(path, std::string("not valid JSON: ") + e.what());
  }
  const auto& model = member(j, "model", path, "the file");
  if (model.value("type", "BPE") != "BPE") refuse(path, "the model is not BPE");
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    refuse(path, "it has a normalizer, which byte-level BPE as weft reads it does not");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "") {
      refuse(path, std::string("the model sets ") + key + ", which byte-level BPE does not");
    }
  }
  if (model.value("byte_fallback", false)) refuse(path, "the model sets byte_fallback");

  auto tok = std::unique_ptr<BpeTokenizer>(new BpeTokenizer());
  const std::vector<int> byte_of = byte_of_code_point();
  const auto& vocab = member(model, "vocab", path, "the model");
  if (!vocab.is_object()) refuse(path, "the model's vocab is not an object");
  for (const auto& [text, id_json] : vocab.items()) {
    const std::int64_t id = id_json.is_number_integer() ? id_json.get<std::int64_t>() : -1;
    if (id < 0 || id >= (1 << 24)) refuse(path, "token \"" + text + "\" has a bad id");
    auto bytes = token_bytes(text, byte_of);
    if (!bytes) refuse(path, "token \"" + text + "\" is not in the ByteLevel alphabet");
    if (tok->tokens_.size() <= static_cast<std::size_t>(id)) {
      tok->tokens_.resize(static_cast<std::size_t>(id) + 1);
      tok->kinds_.resize(static_cast<std::size_t>(id) + 1, Kind::kNone);
    }
    if (tok->kinds_[static_cast<std::size_t>(id)] != Kind::kNone) {
      refuse(path, "id " + std::to_string(id) + " is given to two tokens");
    }
    tok->tokens_[static_cast<std::size_t>(id)] = std::move(*bytes);
    tok->kinds_[static_cast<std::size_t>(id)] = Kind::kOrdinary;
  }
  if (j.contains("added_tokens")) {
    for (const auto& added : j["added_tokens"]) {
      tok->add_special(member(added, "id", path, "an added token").get<std::int32_t>(),
                       member(added, "content", path, "an added token").get<std::string>(), path);
    }
  }
  tok->index(path);

  const auto& merges = member(model, "merges", path, "the model");
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    auto [left, right] = merge_pair(merges[rank], path, rank);
    auto lb = token_bytes(left, byte_of), rb = token_bytes(right, byte_of);
    auto id = [&](const std::optional<std::string>& b) -> std::int32_t {
      auto it = b ? tok->ids_.find(*b) : tok->ids_.end();
      return it == tok->ids_.end() ? -1 : it->second;
    };
    const std::int32_t a = id(lb), b = id(rb);
    const std::int32_t merged = lb && rb ? id(*lb + *rb) : -1;
    if (a < 0 || b < 0 || merged < 0) {
      refuse(path, "merge " + std::to_string(rank) + " (\"" + left + " " + right +
                       "\") names a token the vocabulary lacks");
    }
    tok->merges_->add(a, b, Merge{static_cast<std::int32_t>(rank), merged});
  }
  tok->whole_piece_first_ = model.value("ignore_merges", false);
  tok->splitter_ = std::make_unique<PieceSplitter>(
      pre_tokenizer_pattern(member(j, "pre_tokenizer", path, "the file"), path), path);
  tok->bos_ = tok->first_special({"<|begin_of_text|>", "<s>", "<|startoftext|>"});
  tok->eos_ = tok->first_special({"<|end_of_text|>", "<|endoftext|>", "</s>"});
  tok->description_ = "byte-level BPE " + path + " (" + std::to_string(tok->vocab_size()) +
                      " tokens, " + std::to_string(tok->merges_->size()) + " merges)";
  return tok;
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_tiktoken(const std::string& path,
                                                          const std::string& encoding) {
  auto tok = std::unique_ptr<BpeTokenizer>(new BpeTokenizer());
  internal::read_tiktoken_ranks(path, tok->tokens_);
  tok->kinds_.assign(tok->tokens_.size(), Kind::kOrdinary);
  for (std::size_t id = 0; id < tok->tokens_.size(); ++id) {
    if (tok->tokens_[id].empty()) tok->kinds_[id] = Kind::kNone;
  }
  const internal::TiktokenEncoding& e =
      internal::tiktoken_encoding(encoding, static_cast<std::int64_t>(tok->tokens_.size()), path);
  for (const auto& [text, id] : e.specials) tok->add_special(id, text, path);
  tok->index(path);
  // tiktoken merges the adjacent pair whose concatenation has the lowest rank: every split
  // of a token into two tokens is a merge of that rank.
  for (std::size_t id = 0; id < tok->tokens_.size(); ++id) {
    const std::string_view t = tok->tokens_[id];
    if (tok->kinds_[id] != Kind::kOrdinary || t.size() < 2) continue;
    for (std::size_t cut = 1; cut < t.size(); ++cut) {
      auto left = tok->ids_.find(t.substr(0, cut)), right = tok->ids_.find(t.substr(cut));
      if (left != tok->ids_.end() && right != tok->ids_.end()) {
        tok->merges_->add(left->second, right->second,
                          Merge{static_cast<std::int32_t>(id), static_cast<std::int32_t>(id)});
      }
    }
  }
  tok->splitter_ = std::make_unique<PieceSplitter>(e.pattern, path);
  tok->bos_ = e.bos.empty() ? std::nullopt : tok->special_id(e.bos);
  tok->eos_ = e.eos.empty() ? std::nullopt : tok->special_id(e.eos);
  tok->description_ = "byte-level BPE " + path + " (tiktoken ranks, " + e.name + ", " +
                      std::to_string(tok->vocab_size()) + " tokens)";
  return tok;
}

void BpeTokenizer::add_special(std::int32_t id, std::string text, const std::string& path) {
  if (id < 0 || id >= (1 << 24) || text.empty()) {
    refuse(path, "special token \"" + text + "\" has a bad id or no text");
  }
  const auto at = static_cast<std::size_t>(id);
  if (tokens_.size() <= at) {
    tokens_.resize(at + 1);
    kinds_.resize(at + 1, Kind::kNone);
  }
  // An added token may repeat an ordinary one with the same id (Hugging Face lists some so).
  if (kinds_[at] == Kind::kOrdinary && tokens_[at] == text) return;
  if (kinds_[at] != Kind::kNone) refuse(path, "id " + std::to_string(id) + " is given twice");
  tokens_[at] = std::move(text);
  kinds_[at] = Kind::kSpecial;
}

void BpeTokenizer::index(const std::string& path) {
  for (std::size_t id = 0; id < tokens_.size(); ++id) {
    if (kinds_[id] == Kind::kNone) continue;
    auto& map = kinds_[id] == Kind::kOrdinary ? ids_ : specials_;
    if (!map.emplace(tokens_[id], static_cast<std::int32_t>(id)).second) {
      refuse(path, "two tokens have the same bytes (ids " + std::to_string(map[tokens_[id]]) +
                       " and " + std::to_string(id) + ")");
    }
    if (kinds_[id] == Kind::kSpecial) {
      longest_special_ = std::max(longest_special_, tokens_[id].size());
      special_starts_[static_cast<unsigned char>(tokens_[id][0])] = true;
    }
  }
  for (int b = 0; b < 256; ++b) {
    auto it = ids_.find(std::string_view(std::string(1, static_cast<char>(b))));
    if (it == ids_.end()) refuse(path, "byte " + std::to_string(b) + " is not a token");
    byte_ids_[b] = it->second;
  }
}

std::optional<std::int32_t> BpeTokenizer::first_special(
    std::initializer_list<std::string_view> names) const {
  for (std::string_view name : names) {
    if (auto id = special_id(name)) return id;
  }
  return std::nullopt;
}

std::optional<std::int32_t> BpeTokenizer::special_id(std::string_view text) const {
  auto it = specials_.find(text);
  if (it != specials_.end()) return it->second;
  return std::nullopt;
}

void BpeTokenizer::encode(std::string_view text, std::vector<std::int32_t>& out,
                          Specials specials) const {
  if (specials == Specials::kAsText || specials_.empty()) {
    encode_ordinary(text, out);
    return;
  }
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!special_starts_[static_cast<unsigned char>(text[i])]) continue;
    for (std::size_t len = std::min(longest_special_, text.size() - i); len > 0; --len) {
      auto it = specials_.find(text.substr(i, len));
      if (it == specials_.end()) continue;
      encode_ordinary(text.substr(start, i - start), out);
      out.push_back(it->second);
      start = i + len;
      i = start - 1;
      break;
    }
  }
  encode_ordinary(text.substr(start), out);
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<std::int32_t>& out) const {
  splitter_->split(text, [&](std::string_view piece) { encode_piece(piece, out); });
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  if (whole_piece_first_) {
    auto it = ids_.find(piece);
    if (it != ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<std::int32_t> symbols;
  symbols.clear();
  for (char c : piece) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
  merges_->apply(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

std::string BpeTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string text;
  for (std::int32_t id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size() ||
        kinds_[static_cast<std::size_t>(id)] == Kind::kNone) {
      throw TokenizerError("token id " + std::to_string(id) + " is not in the vocabulary (" +
                           describe() + ")");
    }
    text += tokens_[static_cast<std::size_t>(id)];
  }
  return text;
}

}  // namespace weft::data
