// Integers read from text that came from outside (the environment, a store, a file): the whole
// text must be the number, so "12x", "" and " 12" are refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace weft {

// The decimal integer `text` spells in full, if it lies in [low, high]; std::nullopt otherwise.
std::optional<std::int64_t> parse_integer(std::string_view text, std::int64_t low,
                                          std::int64_t high);

}  // namespace weft
