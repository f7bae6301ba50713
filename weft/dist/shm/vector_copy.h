// Copies between a rank's buffers and the shared slots in the target's widest vectors, with
// ordinary or streaming stores.
// glibc's memcpy moves blocks of 2 KiB and more with `rep movsb`, which on AMD cores ran at
// 1.6-2 GB/s in some jobs (why was not pinned down) where plain vector moves ran at 22-24 GB/s
// (docs/PERFORMANCE_LOG.md, "Copies through the slots").
#pragma once

#include <cstddef>

namespace weft::dist::shm {

// dst[0, bytes) = src[0, bytes); the ranges must not overlap. Neither need be aligned.
void vector_copy(std::byte* dst, const std::byte* src, std::size_t bytes);
// The same with streaming (non-temporal) stores: the lines go to memory instead of staying,
// dirty, in this core's cache, and are in memory when it returns (a fence after the stores).
void stream_copy(std::byte* dst, const std::byte* src, std::size_t bytes);

}  // namespace weft::dist::shm
