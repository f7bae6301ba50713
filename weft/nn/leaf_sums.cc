#include "weft/nn/leaf_sums.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>

#include "weft/base/dtype.h"
#include "weft/base/error.h"
#include "weft/kernels/parallel.h"

namespace weft::nn {

namespace {

// The smallest node holding both of two disjoint blocks.
LeafBlock common_parent(const LeafBlock& a, const LeafBlock& b) {
  const int level = std::bit_width(static_cast<std::uint64_t>(a.first ^ b.first));
  const std::int64_t size = std::int64_t{1} << level;
  return {a.first & ~(size - 1), size};
}

// left[i] += right[i]: plain additions, the same bits on every target and thread count;
// with bf16 each sum rounded to bfloat16.
template <class T>
void add_into(T* left, const T* right, std::int64_t n, bool bf16) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16) {
      kernels::parallel_for(n, 1 << 15, [&](std::int64_t first, std::int64_t end) {
        for (std::int64_t i = first; i < end; ++i) left[i] = round_to_bfloat16(left[i] + right[i]);
      });
      return;
    }
  }
  kernels::parallel_for(n, 1 << 15, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t i = first; i < end; ++i) left[i] += right[i];
  });
}

void round_in_place(float* values, std::int64_t n) {
  kernels::parallel_for(n, 1 << 15, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t i = first; i < end; ++i) values[i] = round_to_bfloat16(values[i]);
  });
}

bool siblings(const LeafBlock& left, const LeafBlock& right) {
  return left.count == right.count && left.first % (2 * left.count) == 0 &&
         left.first + left.count == right.first;
}

}  // namespace

// Adjacent blocks whose common parent is lowest have no other block under that parent (one
// between them would share a lower parent with one of them), so that parent's sum is theirs:
// merging the lowest pair first, again and again, walks the canonical tree bottom-up. Empty
// blocks (count 0: the exchanges' padding) are left out.
template <class T>
T* combine_blocks(std::vector<LeafBlock> blocks, std::vector<T*> values, std::int64_t n,
                  bool bf16) {
  std::vector<std::size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return blocks[a].first < blocks[b].first; });
  std::vector<LeafBlock> b;
  std::vector<T*> v;
  for (std::size_t i : order) {
    if (blocks[i].count == 0) continue;  // an empty block: padding
    b.push_back(blocks[i]);
    v.push_back(values[i]);
  }
  if (b.empty()) return nullptr;
  while (b.size() > 1) {
    std::size_t lowest = 0;
    for (std::size_t i = 1; i + 1 < b.size(); ++i) {
      if (common_parent(b[i], b[i + 1]).count < common_parent(b[lowest], b[lowest + 1]).count)
        lowest = i;
    }
    add_into(v[lowest], v[lowest + 1], n, bf16);
    b[lowest] = common_parent(b[lowest], b[lowest + 1]);
    b.erase(b.begin() + static_cast<std::ptrdiff_t>(lowest) + 1);
    v.erase(v.begin() + static_cast<std::ptrdiff_t>(lowest) + 1);
  }
  return v[0];
}

template <class T>
T* LeafSums<T>::open(bool zeroed) {
  if (!opened_) {
    if (spare_.empty()) {
      opened_.reset(new T[static_cast<std::size_t>(n_)]);
    } else {
      opened_ = std::move(spare_.back());
      spare_.pop_back();
    }
  }
  if (zeroed) std::memset(opened_.get(), 0, static_cast<std::size_t>(n_) * sizeof(T));
  return opened_.get();
}

template <class T>
void LeafSums<T>::add(LeafBlock block) {
  if (!opened_) throw Error("LeafSums::add without open: no sum to add");
  if constexpr (std::is_same_v<T, float>) {
    if (bf16_) round_in_place(opened_.get(), n_);
  }
  blocks_.push_back(block);
  values_.push_back(std::move(opened_));
  while (blocks_.size() > 1 && siblings(blocks_[blocks_.size() - 2], blocks_.back())) {
    add_into(values_[values_.size() - 2].get(), values_.back().get(), n_, bf16_);
    blocks_[blocks_.size() - 2].count *= 2;
    blocks_.pop_back();
    spare_.push_back(std::move(values_.back()));
    values_.pop_back();
  }
}

template <class T>
void LeafSums<T>::add_into_target() {
  std::vector<T*> values;
  for (auto& v : values_) values.push_back(v.get());
  if (const T* sum = combine_blocks(blocks_, values, n_, bf16_)) add_into(target_, sum, n_, false);
  clear();
}

template <class T>
std::int64_t LeafSums<T>::bytes() const {
  const auto buffers = values_.size() + spare_.size() + (opened_ ? 1 : 0);
  return static_cast<std::int64_t>(buffers) * n_ * static_cast<std::int64_t>(sizeof(T));
}

template <class T>
void LeafSums<T>::clear() {
  for (auto& v : values_) spare_.push_back(std::move(v));
  values_.clear();
  blocks_.clear();
}

template <class T>
void LeafSums<T>::release() {
  clear();
  spare_.clear();
  opened_.reset();
}

template class LeafSums<float>;
template class LeafSums<double>;
template float* combine_blocks<float>(std::vector<LeafBlock>, std::vector<float*>, std::int64_t,
                                      bool);
template double* combine_blocks<double>(std::vector<LeafBlock>, std::vector<double*>, std::int64_t,
                                        bool);

void LeafTrees::start(std::int64_t first_sequence, std::int64_t sequence_rows,
                      std::int64_t sequences) {
  const std::int64_t whole = sequence_rows * cp_size_;  // rows of a whole sequence
  if (sequence_rows <= 0 || whole % sequence_blocks_ != 0) {
    throw InvalidArgument("layout-invariant sums: sequences of " + std::to_string(whole) +
                          " positions do not split into " + std::to_string(sequence_blocks_) +
                          " blocks (training.deterministic_sequence_blocks): choose a power "
                          "of two that divides the sequence length");
  }
  if (first_sequence < 0 || first_sequence >= sequences) {
    throw InvalidArgument("layout-invariant sums: sequence " + std::to_string(first_sequence) +
                          " of a batch of " + std::to_string(sequences));
  }
  active_ = true;
  first_sequence_ = first_sequence;
  sequence_rows_ = sequence_rows;
  sequences_ = sequences;
  leaf_rows_ = whole / sequence_blocks_;
}

void LeafTrees::set_feature_blocks(int blocks) {
  if (blocks < 1 || (blocks & (blocks - 1)) != 0) {
    throw InvalidArgument("layout-invariant feature blocks: " + std::to_string(blocks) +
                          " is not a power of two");
  }
  feature_blocks_ = blocks;
}

void LeafTrees::set_sequence_blocks(int blocks, int cp_rank, int cp_size) {
  if (blocks < 1 || (blocks & (blocks - 1)) != 0) {
    throw InvalidArgument("layout-invariant sequence blocks: " + std::to_string(blocks) +
                          " is not a power of two");
  }
  if (cp_size > 1 && blocks % (2 * cp_size) != 0) {
    throw InvalidArgument("layout-invariant context parallelism over " + std::to_string(cp_size) +
                          " ranks cuts each sequence into " + std::to_string(2 * cp_size) +
                          " chunks of whole sequence blocks: "
                          "training.deterministic_sequence_blocks (" +
                          std::to_string(blocks) + ") must be a multiple of " +
                          std::to_string(2 * cp_size));
  }
  sequence_blocks_ = blocks;
  cp_rank_ = cp_rank;
  cp_size_ = cp_size;
}

std::int64_t LeafTrees::check_rows(std::int64_t rows) const {
  if (rows % sequence_rows_ != 0) {
    throw InvalidArgument("layout-invariant sums: " + std::to_string(rows) +
                          " rows are not whole sequences of " + std::to_string(sequence_rows_) +
                          " rows");
  }
  return rows;
}

// Leaves are numbered position-major: block k of sequence g is leaf f(k) x sequences + g, where
// f folds the blocks so that the two chunks any context-parallel rank holds (r and
// 2 x cp - 1 - r) are one aligned run of f whatever the degree (block k of the first half
// f = 2k, block k of the second half f = 2 (blocks - 1 - k) + 1). A rank then holds, per
// block position, one run of its sequences: a context-parallel rank blocks / cp runs, a
// data-parallel one `blocks` runs (one with whole-sequence leaves), rather than one per
// sequence, and the exchanges move as many blocks.
std::int64_t LeafTrees::leaf_at(std::int64_t i, std::int64_t n) const {
  const std::int64_t blocks = sequence_blocks_;
  std::int64_t b = 0, k = 0;  // sequence, block of it
  if (cp_size_ == 1) {
    b = i / blocks;
    k = i % blocks;
  } else {  // a rank's rows are its first chunk of every sequence, then its second
    const std::int64_t per_chunk = blocks / (2 * cp_size_);
    const std::int64_t per_local = n / (2 * per_chunk) * per_chunk;
    const std::int64_t local = i / per_local;
    b = i % per_local / per_chunk;
    k = (local == 0 ? cp_rank_ : 2 * cp_size_ - 1 - cp_rank_) * per_chunk + i % per_chunk;
  }
  const std::int64_t folded = blocks == 1 ? 0 : k < blocks / 2 ? 2 * k : 2 * (blocks - 1 - k) + 1;
  return folded * sequences_ + first_sequence_ + b;
}

std::vector<std::pair<std::int64_t, std::int64_t>> LeafTrees::leaves_of(std::int64_t rows) const {
  const std::int64_t n = check_rows(rows) / leaf_rows_;
  std::vector<std::pair<std::int64_t, std::int64_t>> leaves;
  leaves.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) leaves.emplace_back(leaf_at(i, n), i);
  std::sort(leaves.begin(), leaves.end());
  return leaves;
}

LeafSums<float>& LeafTrees::of(const void* user, float* target, std::int64_t n) {
  for (std::size_t i = 0; i < trees_.size(); ++i) {
    if (users_[i] != user) continue;
    if (trees_[i]->size() != n) throw Error("layout-invariant sums: a gradient changed its size");
    trees_[i]->retarget(target);
    return *trees_[i];
  }
  users_.push_back(user);
  trees_.push_back(std::make_unique<LeafSums<float>>(target, n, bf16_gradients_));
  return *trees_.back();
}

void LeafTrees::set_bf16_gradients(bool on) {
  bf16_gradients_ = on;
  trees_.clear();
  users_.clear();
}

void LeafTrees::add_into_targets() {
  for (auto& t : trees_) t->add_into_target();
}

LeafSums<float>& LeafTrees::feature_sums(std::int64_t n) {
  std::unique_ptr<LeafSums<float>>& sums = feature_sums_[n];
  if (!sums) sums = std::make_unique<LeafSums<float>>(nullptr, n);
  sums->clear();
  return *sums;
}

std::int64_t LeafTrees::bytes() const {
  std::int64_t n = loss_.bytes();
  for (const auto& t : trees_) n += t->bytes();
  for (const auto& [size, sums] : feature_sums_) n += sums->bytes();
  return n;
}

void LeafTrees::clear() {
  for (auto& t : trees_) t->clear();
  loss_.clear();
}

}  // namespace weft::nn
