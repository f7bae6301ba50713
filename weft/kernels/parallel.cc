#include "weft/kernels/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "weft/base/check.h"
#include "weft/exec/thread_pool.h"

namespace weft::kernels {
namespace {

constexpr std::chrono::microseconds kIdleSpin{1000};
std::atomic<int> g_threads{1};
std::mutex g_pool_mu;
std::shared_ptr<ThreadPoolExecutor> g_pool;  // threads() - 1 workers; the caller is the last

// A reference to the pool that stays valid while the caller uses it, even if set_threads
// replaces the pool meanwhile.
std::shared_ptr<ThreadPoolExecutor> pool(int workers) {
  std::lock_guard lock(g_pool_mu);
  if (!g_pool) {
    // The loops of a training step follow each other within microseconds to a millisecond or
    // so: workers that sleep between them join each loop late (docs/PERFORMANCE_LOG.md, session 3).
    g_pool = std::make_shared<ThreadPoolExecutor>(
        static_cast<std::size_t>(workers),
        ExecutorOptions{.thread_name_prefix = "weft-kernels", .idle_spin = kIdleSpin});
  }
  return g_pool;
}

}  // namespace

void set_threads(int threads) {
  WEFT_CHECK_GE(threads, 1);
  std::lock_guard lock(g_pool_mu);
  if (threads != g_threads.load()) g_pool.reset();
  g_threads.store(threads);
}

int threads() { return g_threads.load(); }

void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn) {
  const std::int64_t parts = std::min<std::int64_t>(
      threads(), std::max<std::int64_t>(1, n / std::max<std::int64_t>(grain, 1)));
  if (parts <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  auto bound = [&](std::int64_t p) { return n * p / parts; };
  const std::shared_ptr<ThreadPoolExecutor> workers = pool(threads() - 1);
  std::vector<Future<void>> futures;
  for (std::int64_t p = 1; p < parts; ++p) {
    futures.push_back(workers->submit([&fn, b = bound(p), e = bound(p + 1)] { fn(b, e); }));
  }
  std::exception_ptr error;
  try {
    fn(0, bound(1));
  } catch (...) {
    error = std::current_exception();
  }
  for (auto& f : futures) {
    try {
      f.get();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace weft::kernels
