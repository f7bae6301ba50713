// BPE's merge rule over token ids: which adjacent pairs merge, in what order, into what.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace weft::data::internal {

struct Merge {
  std::int32_t rank;    // lower merges first
  std::int32_t merged;  // the token the pair becomes
};

class MergeTable {
 public:
  // A pair already present keeps its lower rank.
  void add(std::int32_t left, std::int32_t right, Merge merge);
  const Merge* find(std::int32_t left, std::int32_t right) const {
    auto it = merges_.find(key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  std::size_t size() const { return merges_.size(); }

  // Merges `symbols` (a piece's tokens, one per byte at first) in place until no adjacent
  // pair has a merge: always the pair of lowest rank, the leftmost among equals.
  void apply(std::vector<std::int32_t>& symbols) const;

 private:
  static std::uint64_t key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
           static_cast<std::uint32_t>(right);
  }
  void apply_by_scan(std::vector<std::int32_t>& symbols) const;
  void apply_by_heap(std::vector<std::int32_t>& symbols) const;

  std::unordered_map<std::uint64_t, Merge> merges_;
};

}  // namespace weft::data::internal
