#include "weft/parallel/leaf_reduce.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "weft/base/error.h"
#include "weft/kernels/convert.h"

namespace weft::parallel {

std::vector<std::vector<nn::LeafBlock>> blocks_of_all(dist::ProcessGroup& group,
                                                      const std::vector<nn::LeafBlock>& mine,
                                                      bool consistent, std::int64_t agreed) {
  const auto ranks = static_cast<std::size_t>(group.size());
  std::vector<std::int64_t> count{consistent ? static_cast<std::int64_t>(mine.size()) : -1, agreed};
  std::vector<std::int64_t> counts(2 * ranks);  // [rank][count, agreed]
  group.all_gather(counts, count);
  std::int64_t most = 0;
  for (std::size_t r = 0; r < ranks; ++r) {
    if (counts[2 * r] < 0 || counts[2 * r + 1] != counts[1]) {
      throw Error("layout-invariant sums: on rank " + std::to_string(r) +
                  ", a gradient did not see every leaf of that rank (a layer skipped in "
                  "backward?)");
    }
    most = std::max(most, counts[2 * r]);
  }
  const auto entries = static_cast<std::size_t>(most);
  std::vector<std::int64_t> flat(2 * entries, 0), all(2 * entries * ranks);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    flat[2 * i] = mine[i].first;
    flat[2 * i + 1] = mine[i].count;
  }
  group.all_gather(all, flat);
  std::vector<std::vector<nn::LeafBlock>> out(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    for (std::size_t i = 0; i < entries; ++i) {
      const std::int64_t* b = &all[(r * entries + i) * 2];
      out[r].push_back({b[0], b[1]});
    }
  }
  return out;
}

std::vector<std::vector<nn::LeafBlock>> blocks_of_all(
    dist::ProcessGroup& group, const std::vector<const nn::LeafSums<float>*>& sums,
    std::int64_t agreed) {
  const std::vector<nn::LeafBlock> mine =
      sums.empty() ? std::vector<nn::LeafBlock>{} : sums[0]->blocks();
  const bool consistent =
      std::all_of(sums.begin(), sums.end(), [&](const auto* t) { return t->blocks() == mine; });
  return blocks_of_all(group, mine, consistent, agreed);
}

float* combine_gathered(const std::vector<std::vector<nn::LeafBlock>>& all, float* values,
                        std::int64_t stride, std::int64_t n, bool bf16) {
  std::vector<nn::LeafBlock> blocks;
  std::vector<float*> at;
  for (std::size_t r = 0; r < all.size(); ++r) {
    for (std::size_t e = 0; e < all[r].size(); ++e) {
      blocks.push_back(all[r][e]);
      at.push_back(values + static_cast<std::int64_t>(r * all[r].size() + e) * stride);
    }
  }
  return nn::combine_blocks(blocks, at, n, bf16);
}

namespace {

// Values onto the wire: copied, or narrowed to the bfloat16 they are (bf16 sums: exact).
void to_wire(const float* from, float* to, std::size_t n) {
  std::memcpy(to, from, n * sizeof(float));
}
void to_wire(const float* from, BFloat16* to, std::size_t n) {
  kernels::to_bfloat16(from, to, static_cast<std::int64_t>(n));
}

}  // namespace

float* LeafReducer::widen(const std::vector<BFloat16>& received) {
  widened_.resize(received.size());
  kernels::to_float_threaded(received.data(), widened_.data(),
                             static_cast<std::int64_t>(received.size()));
  return widened_.data();
}

void LeafReducer::reduce(dist::ProcessGroup* group, nn::LeafTrees& trees) {
  if (group == nullptr || group->size() == 1) {
    trees.add_into_targets();
    return;
  }
  if (trees.all().empty()) return;
  if (trees.all()[0]->bf16()) {
    reduce_as(*group, trees, bf16_wire_);
  } else {
    reduce_as(*group, trees, float_wire_);
  }
}

template <class W>
void LeafReducer::reduce_as(dist::ProcessGroup& group, nn::LeafTrees& trees, Wire<W>& wire) {
  const auto& all = trees.all();
  std::vector<const nn::LeafSums<float>*> sums;
  for (const auto& t : all) sums.push_back(t.get());
  const std::vector<std::vector<nn::LeafBlock>> blocks = blocks_of_all(group, sums);
  const std::size_t mine = all[0]->blocks().size();
  const auto ranks = static_cast<std::size_t>(group.size());
  const std::size_t entries = blocks[0].size();  // this rank's, then empty ones
  // Tree t's slice j: elements [j * slice[t], (j + 1) * slice[t]) (the last ones padded).
  std::vector<std::size_t> slice, offset;
  std::size_t total = 0;
  for (const auto& t : all) {
    slice.push_back((static_cast<std::size_t>(t->size()) + ranks - 1) / ranks);
    offset.push_back(total);
    total += slice.back();
  }
  // [rank][entry][tree's slice]: to rank j, slice j of each of this rank's entries.
  wire.send.resize(ranks * entries * total);
  wire.received.resize(wire.send.size());
  wire.combined.resize(total);
  wire.gathered.resize(ranks * total);
  for (std::size_t j = 0; j < ranks; ++j) {
    for (std::size_t e = 0; e < entries; ++e) {
      for (std::size_t t = 0; t < all.size(); ++t) {
        const auto n = static_cast<std::size_t>(all[t]->size());
        const std::size_t first = std::min(n, j * slice[t]), end = std::min(n, first + slice[t]);
        W* to = &wire.send[(j * entries + e) * total + offset[t]];
        const std::size_t n_here = e < mine ? end - first : 0;
        if (n_here > 0) to_wire(all[t]->values(e) + first, to, n_here);
        std::fill(to + n_here, to + slice[t], W{});  // padding, and the empty blocks (zeros)
      }
    }
  }
  group.all_to_all(wire.received, wire.send);
  float* received = widen(wire.received);
  for (std::size_t t = 0; t < all.size(); ++t) {
    const float* sum =
        combine_gathered(blocks, received + offset[t], static_cast<std::int64_t>(total),
                         static_cast<std::int64_t>(slice[t]), all[t]->bf16());
    to_wire(sum, &wire.combined[offset[t]], slice[t]);
  }
  group.all_gather(wire.gathered, wire.combined);
  for (std::size_t t = 0; t < all.size(); ++t) {
    const auto n = static_cast<std::size_t>(all[t]->size());
    float* target = all[t]->target();
    for (std::size_t j = 0; j < ranks; ++j) {
      const std::size_t first = std::min(n, j * slice[t]), end = std::min(n, first + slice[t]);
      const W* from = &wire.gathered[j * total + offset[t]];
      for (std::size_t i = first; i < end; ++i) target[i] += static_cast<float>(from[i - first]);
    }
    all[t]->clear();
  }
}

std::int64_t LeafReducer::bytes() const {
  return static_cast<std::int64_t>(float_wire_.bytes() + bf16_wire_.bytes() +
                                   widened_.capacity() * sizeof(float));
}

// The ranks hold different numbers of blocks (pipeline stages before the last hold none).
double LeafReducer::sum_losses(dist::ProcessGroup* group, nn::LeafTrees& trees, bool counted) {
  nn::LeafSums<double>& loss = trees.loss();
  std::vector<std::int64_t> blocks;
  std::vector<double> values;
  for (std::size_t i = 0; counted && i < loss.blocks().size(); ++i) {
    blocks.insert(blocks.end(), {loss.blocks()[i].first, loss.blocks()[i].count});
    values.push_back(*loss.values(i));
  }
  if (group != nullptr && group->size() > 1) {
    const auto ranks = static_cast<std::size_t>(group->size());
    std::vector<std::int64_t> count{static_cast<std::int64_t>(values.size())}, counts(ranks);
    group->all_gather(counts, count);
    std::vector<std::size_t> value_counts, block_counts;
    for (const std::int64_t c : counts) {
      value_counts.push_back(static_cast<std::size_t>(c));
      block_counts.push_back(2 * static_cast<std::size_t>(c));
    }
    std::vector<std::int64_t> all_blocks(
        2 * std::accumulate(counts.begin(), counts.end(), std::size_t{0}));
    std::vector<double> all_values(all_blocks.size() / 2);
    group->all_gather_v(all_blocks, blocks, block_counts);
    group->all_gather_v(all_values, values, value_counts);
    blocks = std::move(all_blocks);
    values = std::move(all_values);
  }
  std::vector<nn::LeafBlock> b;
  std::vector<double*> pointers;
  for (std::size_t i = 0; i < values.size(); ++i) {
    b.push_back({blocks[2 * i], blocks[2 * i + 1]});
    pointers.push_back(&values[i]);
  }
  const double* sum = nn::combine_blocks(b, pointers, 1);
  return sum != nullptr ? *sum : 0.0;
}

}  // namespace weft::parallel
