// The pre-tokenizer of byte-level BPE: a text split into pieces by a regular expression
// (PCRE2 with Unicode properties, JIT-compiled). Pieces are the matches and the text between
// them, so nothing is dropped: bytes that are not valid UTF-8 never match and become pieces
// of their own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "weft/base/function_ref.h"

namespace weft::data::internal {

class PieceSplitter {
 public:
  // Throws TokenizerError naming `where` when `pattern` does not compile.
  PieceSplitter(const std::string& pattern, const std::string& where);
  ~PieceSplitter();
  PieceSplitter(const PieceSplitter&) = delete;
  PieceSplitter& operator=(const PieceSplitter&) = delete;

  // Calls on_piece for each piece of `text`, in order. Safe on many threads at once.
  void split(std::string_view text, FunctionRef<void(std::string_view)> on_piece) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace weft::data::internal
