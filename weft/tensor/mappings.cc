#include "weft/tensor/mappings.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <vector>

#include "weft/base/system.h"

namespace weft::mappings {
namespace {

constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

struct Block {
  void* address;
  std::size_t bytes;
};

class Registry {
 public:
  // A kept block of this size, or nullptr once a new one fits under the peaks: then `unmap`
  // holds the kept blocks to unmap (after the lock) and `peak_before` the peak to restore if
  // the new mapping fails.
  void* reuse_or_make_room(std::size_t bytes, std::vector<Block>& unmap, std::size_t& peak_before) {
    std::lock_guard lock(mu_);
    usage_.in_use += bytes;
    const auto same =
        std::find_if(kept_.begin(), kept_.end(), [&](const Block& b) { return b.bytes == bytes; });
    if (same != kept_.end()) {
      void* address = same->address;
      kept_.erase(same);
      usage_.kept -= bytes;
      return address;
    }
    peak_before = usage_.peak;
    usage_.peak = std::max(usage_.peak, usage_.in_use);
    if (kept_.empty()) return nullptr;
    // 0 where /proc is unreadable: nothing is kept then beyond what a new block needs.
    std::size_t resident = static_cast<std::size_t>(resident_memory_bytes());
    const std::size_t most_resident = static_cast<std::size_t>(peak_resident_memory_bytes());
    const auto over = [&] {
      return usage_.in_use + usage_.kept > usage_.peak || resident == 0 ||
             resident + bytes > most_resident;
    };
    while (!kept_.empty() && over()) {  // oldest first
      unmap.push_back(kept_.front());
      kept_.pop_front();
      usage_.kept -= unmap.back().bytes;
      resident -= std::min(resident, unmap.back().bytes);
    }
    return nullptr;
  }

  void unmade(std::size_t bytes, std::size_t peak_before) {
    std::lock_guard lock(mu_);
    usage_.in_use -= bytes;
    usage_.peak = std::max(peak_before, usage_.in_use + usage_.kept);
  }

  // False if it could not be kept (no memory for the list): the caller unmaps it.
  bool keep(void* address, std::size_t bytes) noexcept {
    std::lock_guard lock(mu_);
    try {
      kept_.push_back({address, bytes});
    } catch (const std::bad_alloc&) {
      usage_.in_use -= bytes;
      return false;
    }
    usage_.in_use -= bytes;
    usage_.kept += bytes;
    return true;
  }

  Usage usage() {
    std::lock_guard lock(mu_);
    return usage_;
  }

 private:
  std::mutex mu_;
  std::deque<Block> kept_;
  Usage usage_;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: storages outlive statics
  return *r;
}

}  // namespace

void* take(std::size_t bytes, bool zeroed) {
  std::vector<Block> unmap;
  std::size_t peak_before = 0;
  void* kept = registry().reuse_or_make_room(bytes, unmap, peak_before);
  for (const Block& b : unmap) munmap(b.address, b.bytes);
  if (kept != nullptr) {
    if (zeroed) std::memset(kept, 0, bytes);
    return kept;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    registry().unmade(bytes, peak_before);
    throw std::bad_alloc();
  }
  // Advice only: where huge pages are off or short, the mapping keeps 4 KiB pages.
  if (bytes >= kHugePageBytes) madvise(p, bytes, MADV_HUGEPAGE);
  return p;  // a fresh mapping is zero-filled
}

void give(void* block, std::size_t bytes) noexcept {
  if (!registry().keep(block, bytes)) munmap(block, bytes);
}

Usage usage() { return registry().usage(); }

}  // namespace weft::mappings
