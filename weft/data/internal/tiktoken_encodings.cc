#include "weft/data/internal/tiktoken_encodings.h"

#include <array>

#include "weft/data/internal/text_file.h"
#include "weft/data/tokenizer.h"

namespace weft::data::internal {

namespace {

// The patterns as tiktoken (openai_public.py) and Meta's Llama 3 tokenizer.py define them.
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kCl100kPattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kR50kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3.1's 256 special tokens, ids 128,000 on (Meta's tokenizer.py).
std::vector<std::pair<std::string, std::int32_t>> llama3_specials() {
  std::vector<std::string> names = {"<|begin_of_text|>",
                                    "<|end_of_text|>",
                                    "<|reserved_special_token_0|>",
                                    "<|reserved_special_token_1|>",
                                    "<|finetune_right_pad_id|>",
                                    "<|reserved_special_token_2|>",
                                    "<|start_header_id|>",
                                    "<|end_header_id|>",
                                    "<|eom_id|>",
                                    "<|eot_id|>",
                                    "<|python_tag|>"};
  for (int i = 3; i <= 247; ++i)
    names.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  std::vector<std::pair<std::string, std::int32_t>> specials;
  for (std::size_t i = 0; i < names.size(); ++i) {
    specials.emplace_back(names[i], 128000 + static_cast<std::int32_t>(i));
  }
  return specials;
}

const std::vector<TiktokenEncoding>& encodings() {
  static const std::vector<TiktokenEncoding> all = {
      {"llama3", 128000, kLlama3Pattern, llama3_specials(), "<|begin_of_text|>", "<|end_of_text|>"},
      {"cl100k_base",
       100256,
       kCl100kPattern,
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}},
       "",
       "<|endoftext|>"},
      {"o200k_base",
       199998,
       kO200kPattern,
       {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}},
       "",
       "<|endoftext|>"},
      {"r50k_base", 50256, kR50kPattern, {{"<|endoftext|>", 50256}}, "", "<|endoftext|>"},
  };
  return all;
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with padding; false for anything else.
bool base64_decode(std::string_view text, std::string& bytes) {
  bytes.clear();
  if (text.empty() || text.size() % 4 != 0) return false;
  std::uint32_t bits = 0;
  int held = 0;
  std::size_t padding = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '=') {
      if (i + 2 < text.size() || ++padding > 2) return false;
      continue;
    }
    const int v = base64_value(text[i]);
    if (v < 0 || padding > 0) return false;
    bits = (bits << 6) | static_cast<std::uint32_t>(v);
    held += 6;
    if (held >= 8) {
      held -= 8;
      bytes.push_back(static_cast<char>((bits >> held) & 0xFF));
    }
  }
  return !bytes.empty();
}

}  // namespace

const TiktokenEncoding& tiktoken_encoding(const std::string& name, std::int64_t ranks,
                                          const std::string& path) {
  std::string known;
  for (const TiktokenEncoding& e : encodings()) {
    if (name.empty() ? e.ranks == ranks : e.name == name) return e;
    known += (known.empty() ? "" : ", ") + e.name;
  }
  if (!name.empty()) {
    throw TokenizerError(path + ": no tiktoken encoding is named \"" + name +
                         "\" (known: " + known + ")");
  }
  throw TokenizerError(path + ": a tiktoken rank file of " + std::to_string(ranks) +
                       " ranks matches no encoding weft knows (" + known +
                       "); name one with --tokenizer.encoding");
}

void read_tiktoken_ranks(const std::string& path, std::vector<std::string>& tokens) {
  const std::string text = read_text_file(path, "tiktoken rank");
  tokens.clear();
  std::size_t line_no = 0;
  std::string bytes;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_no;
    if (line.empty()) continue;
    auto bad = [&](const std::string& what) {
      throw TokenizerError(path + ", line " + std::to_string(line_no) + ": " + what);
    };
    const auto space = line.find(' ');
    if (space == std::string_view::npos) bad("not \"<base64 token> <rank>\"");
    if (!base64_decode(line.substr(0, space), bytes)) bad("the token is not base64");
    const std::string_view digits = line.substr(space + 1);
    std::int64_t rank = 0;
    if (digits.empty() || digits.size() > 8) bad("the rank is not a number below 10^8");
    for (char c : digits) {
      if (c < '0' || c > '9') bad("the rank is not a number");
      rank = rank * 10 + (c - '0');
    }
    const auto r = static_cast<std::size_t>(rank);
    if (tokens.size() <= r) tokens.resize(r + 1);
    if (!tokens[r].empty()) bad("rank " + std::to_string(rank) + " appears twice");
    tokens[r] = bytes;
  }
  if (tokens.empty()) throw TokenizerError(path + ": the tiktoken rank file has no ranks");
}

bool looks_like_tiktoken(const std::string& text) {
  const std::size_t end = text.find('\n');
  const std::string_view line(text.data(), end == std::string::npos ? text.size() : end);
  const auto space = line.find(' ');
  std::string bytes;
  if (space == std::string_view::npos || space + 1 == line.size()) return false;
  for (char c : line.substr(space + 1)) {
    if (c < '0' || c > '9') return false;
  }
  return base64_decode(line.substr(0, space), bytes);
}

}  // namespace weft::data::internal
