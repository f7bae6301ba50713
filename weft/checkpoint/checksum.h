// Checksums of checkpoint bytes: XXH3, 64 bits (xxHash, Debian's libxxhash-dev), written as
// "xxh3-64:" and 16 hex digits so that a manifest names its algorithm. XXH3 runs at memory
// speed on every x86-64 (SSE2 up) and catches every flipped bit and truncation a CRC32C
// would, with a 2^-64 rather than 2^-32 chance of missing random damage; Debian packages no
// CRC32C library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace weft::checkpoint {

std::uint64_t checksum(const void* data, std::size_t bytes);

std::string checksum_text(std::uint64_t value);  // "xxh3-64:00ff..."
// The value of checksum_text's form; CheckpointError naming `where` otherwise.
std::uint64_t parse_checksum(const std::string& text, const std::string& where);

}  // namespace weft::checkpoint
