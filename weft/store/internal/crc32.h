// CRC-32 (IEEE 802.3, the zlib polynomial) of the checksummed records in docs/STORES.md.
// Not public.
#pragma once

#include <cstdint>
#include <string_view>

namespace weft::store::internal {

// Continues `crc` (0 to start) over `bytes`.
std::uint32_t crc32(std::string_view bytes, std::uint32_t crc = 0);

}  // namespace weft::store::internal
