// tiktoken's rank files and the encodings that give them meaning: a rank file holds only the
// merge ranks; the pattern and the special tokens come from the encoding's definition.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace weft::data::internal {

struct TiktokenEncoding {
  std::string name;
  std::int64_t ranks;  // how many ordinary tokens its rank file has
  std::string pattern;
  std::vector<std::pair<std::string, std::int32_t>> specials;
  std::string bos, eos;  // special tokens' text; empty: none
};

// `name` ("llama3", "cl100k_base", "o200k_base", "r50k_base"), or the one whose rank count
// is `ranks` when name is empty. Throws TokenizerError naming `path` when none fits.
const TiktokenEncoding& tiktoken_encoding(const std::string& name, std::int64_t ranks,
                                          const std::string& path);

// The rank file's tokens by rank ("<base64> <rank>" per line); ranks missing from it are
// empty. Throws TokenizerError naming the line of anything malformed.
void read_tiktoken_ranks(const std::string& path, std::vector<std::string>& tokens);

// Whether `text` starts like a rank file (a base64 token, a space, digits).
bool looks_like_tiktoken(const std::string& text);

}  // namespace weft::data::internal
