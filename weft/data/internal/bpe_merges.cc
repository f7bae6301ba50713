#include "weft/data/internal/bpe_merges.h"

#include <algorithm>
#include <limits>
#include <queue>

namespace weft::data::internal {

namespace {
// Pieces are mostly a few bytes: rescanning them after each merge is fastest there. Longer
// ones (a run of letters or spaces can be megabytes) take the heap: O(n log n), not O(n^2).
constexpr std::size_t kScanLimit = 48;
}  // namespace

void MergeTable::add(std::int32_t left, std::int32_t right, Merge merge) {
  auto [it, added] = merges_.try_emplace(key(left, right), merge);
  if (!added && merge.rank < it->second.rank) it->second = merge;
}

void MergeTable::apply(std::vector<std::int32_t>& symbols) const {
  if (symbols.size() < 2) return;
  if (symbols.size() <= kScanLimit) {
    apply_by_scan(symbols);
  } else {
    apply_by_heap(symbols);
  }
}

void MergeTable::apply_by_scan(std::vector<std::int32_t>& symbols) const {
  while (symbols.size() > 1) {
    std::size_t best = 0;
    const Merge* best_merge = nullptr;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const Merge* m = find(symbols[i], symbols[i + 1]);
      if (m != nullptr && (best_merge == nullptr || m->rank < best_merge->rank)) {
        best = i;
        best_merge = m;
      }
    }
    if (best_merge == nullptr) return;
    symbols[best] = best_merge->merged;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

// The same order as the scan: candidates ordered by (rank, position of the left symbol);
// positions keep their left-to-right order as symbols merge. A candidate is stale when its
// symbols have changed since it was pushed; it is checked against the current ids, since the
// pair's rank depends on those alone.
void MergeTable::apply_by_heap(std::vector<std::int32_t>& symbols) const {
  struct Candidate {
    std::int32_t rank;
    std::uint32_t left;
    std::int32_t left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  const auto n = static_cast<std::uint32_t>(symbols.size());
  constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
  std::vector<std::uint32_t> prev(n), next(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? kNone : i - 1;
    next[i] = i + 1 == n ? kNone : i + 1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](std::uint32_t left) {
    if (left == kNone || next[left] == kNone) return;
    const std::int32_t a = symbols[left], b = symbols[next[left]];
    if (const Merge* m = find(a, b)) heap.push({m->rank, left, a, b});
  };
  for (std::uint32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const std::uint32_t right = next[c.left];
    if (!alive[c.left] || right == kNone || symbols[c.left] != c.left_id ||
        symbols[right] != c.right_id) {
      continue;
    }
    symbols[c.left] = find(c.left_id, c.right_id)->merged;
    alive[right] = false;
    next[c.left] = next[right];
    if (next[right] != kNone) prev[next[right]] = c.left;
    push(prev[c.left]);
    push(c.left);
  }
  std::size_t out = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (alive[i]) symbols[out++] = symbols[i];
  }
  symbols.resize(out);
}

}  // namespace weft::data::internal
