// Copies between a rank's buffers and the shared slots in the target's widest vectors.
// glibc's memcpy moves blocks of 2 KiB and more with `rep movsb`, which on AMD cores ran at
// 1.6-2 GB/s in some jobs (why was not pinned down) where plain vector moves ran at 22-24 GB/s
// (docs/PERFORMANCE_LOG.md, "Copies through the slots").
#pragma once

#include <cstddef>

namespace weft::dist::shm {

// dst[0, bytes) = src[0, bytes); the ranges must not overlap. Neither need be aligned.
void vector_copy(std::byte* dst, const std::byte* src, std::size_t bytes);

}  // namespace weft::dist::shm
