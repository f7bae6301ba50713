// The cores weft's own kernels use within one process, through weft's ThreadPoolExecutor
// (the matrix products run on the calling thread: matmul.h). One by default: a rank per core is the
// common case, and a rank that owns several cores says so (weft-train's training.threads).
#pragma once

#include <cstdint>
#include <functional>

namespace weft::kernels {

void set_threads(int threads);  // >= 1
int threads();

// Runs fn(begin, end) over [0, n) cut into at most threads() contiguous ranges of at least
// `grain` items, one of them on the calling thread, and returns when all are done (the first
// exception is rethrown). The cut depends only on n, grain and threads(), so results that
// are summed per range are the same from run to run.
void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn);

}  // namespace weft::kernels
