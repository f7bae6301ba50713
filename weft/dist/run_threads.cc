#include "weft/dist/run_threads.h"

#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "weft/dist/backend.h"
#include "weft/dist/threads/thread_transport.h"

namespace weft::dist {

void run_threads(int world_size, const std::function<void(ProcessGroup&)>& fn,
                 GroupOptions options) {
  if (world_size < 1) {
    throw InvalidArgument("dist::run_threads: world_size must be at least 1, got " +
                          std::to_string(world_size));
  }
  auto hub = std::make_shared<ThreadHub>(world_size);
  std::vector<int> members(static_cast<std::size_t>(world_size));
  std::iota(members.begin(), members.end(), 0);
  std::mutex mu;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      try {
        ProcessGroup pg(
            std::make_shared<GenericBackend>("thread", std::make_shared<ThreadTransport>(hub, r),
                                             std::numeric_limits<std::size_t>::max(), hub),
            members, options);
        fn(pg);
      } catch (const std::exception& e) {
        {
          std::lock_guard lock(mu);
          if (!first_error) first_error = std::current_exception();
        }
        hub->abort("rank " + std::to_string(r) + " failed: " + e.what());
      } catch (...) {
        {
          std::lock_guard lock(mu);
          if (!first_error) first_error = std::current_exception();
        }
        hub->abort("rank " + std::to_string(r) + " failed with a non-standard exception");
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace weft::dist
