#include "weft/data/internal/piece_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <string>

#include "weft/data/tokenizer.h"

namespace weft::data::internal {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// JIT matching runs on a stack of its own; the default 32 KiB can end a match on a long run
// of one character class, so each thread keeps a larger one for all its matches.
struct ThreadMatchState {
  pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

}  // namespace

struct PieceSplitter::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

PieceSplitter::PieceSplitter(const std::string& pattern, const std::string& where)
    : compiled_(std::make_unique<Compiled>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (compiled_->code == nullptr) {
    throw TokenizerError(where + ": the pre-tokenizer pattern does not compile at offset " +
                         std::to_string(offset) + " (" + pcre2_message(error) + "): " + pattern);
  }
  // Without JIT (a CPU PCRE2 has no compiler for) matching still works, interpreted.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

PieceSplitter::~PieceSplitter() = default;

void PieceSplitter::split(std::string_view text,
                          FunctionRef<void(std::string_view)> on_piece) const {
  thread_local ThreadMatchState state;
  const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), &pcre2_match_data_free);
  pcre2_match_data* match = data.get();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t at = 0;
  while (at < text.size()) {
    const int rc = pcre2_match(compiled_->code, subject, text.size(), at, 0, match, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      throw TokenizerError("the pre-tokenizer's regular expression failed at byte " +
                           std::to_string(at) + ": " + pcre2_message(rc));
    }
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match);
    const std::size_t begin = span[0];
    std::size_t end = span[1];
    if (begin > at) on_piece(text.substr(at, begin - at));
    if (end == begin) end = begin + 1;  // an empty match: the byte is a piece of its own
    on_piece(text.substr(begin, end - begin));
    at = end;
  }
  if (at < text.size()) on_piece(text.substr(at));
}

}  // namespace weft::data::internal
