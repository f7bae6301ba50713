// Working memory of one collective, kept for the calling thread's next ones. Not public.
#pragma once

#include <cstddef>

namespace weft::dist::algorithms {

// The slots: an algorithm's accumulator and received block, the hierarchical engine's two
// buffers, which it holds while the generic engines under it use theirs, and the buffer an
// engine gathers into for outputs that are not one block (CollectiveEngine::all_gather_list).
enum class Scratch { kAccumulator = 0, kIncoming = 1, kLevelsA = 2, kLevelsB = 3, kStaging = 4 };

// At least `bytes` of this thread's buffer for `slot`. Allocating megabytes per call cost
// more than sending them: glibc hands freed top-of-heap memory back to the kernel, so every
// call faulted it in again (a 4 MiB all-reduce over tcp took 20 ms instead of 3). Grows to
// the largest call's need; never shrinks.
std::byte* scratch(Scratch slot, std::size_t bytes);

}  // namespace weft::dist::algorithms
