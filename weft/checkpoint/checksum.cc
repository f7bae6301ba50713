#include "weft/checkpoint/checksum.h"

#include <cstdio>

#include "weft/checkpoint/safetensors.h"

// The implementation inline: nothing to link, only xxhash.h.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace weft::checkpoint {
namespace {
constexpr char kPrefix[] = "xxh3-64:";
constexpr std::size_t kPrefixLength = sizeof(kPrefix) - 1;
}  // namespace

std::uint64_t checksum(const void* data, std::size_t bytes) { return XXH3_64bits(data, bytes); }

std::string checksum_text(std::uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%s%016llx", kPrefix, static_cast<unsigned long long>(value));
  return text;
}

std::uint64_t parse_checksum(const std::string& text, const std::string& where) {
  const bool ok = text.size() == kPrefixLength + 16 &&
                  text.compare(0, kPrefixLength, kPrefix) == 0 &&
                  text.find_first_not_of("0123456789abcdef", kPrefixLength) == std::string::npos;
  if (!ok) {
    throw CheckpointError(where + ": checksum '" + text + "' is not of the form " + kPrefix +
                          "<16 hex digits>");
  }
  return std::stoull(text.substr(kPrefixLength), nullptr, 16);
}

}  // namespace weft::checkpoint
