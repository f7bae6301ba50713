#include "weft/base/parse.h"

#include <charconv>

namespace weft {

std::optional<std::int64_t> parse_integer(std::string_view text, std::int64_t low,
                                          std::int64_t high) {
  std::int64_t n = 0;
  const char* end = text.data() + text.size();
  const auto [at, error] = std::from_chars(text.data(), end, n);
  if (text.empty() || error != std::errc() || at != end || n < low || n > high) return std::nullopt;
  return n;
}

}  // namespace weft
