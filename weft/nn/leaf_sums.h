// Sums over the tokens of a global batch that come out bitwise the same on any layout.
//
// A floating-point sum depends on its order. In the layout-invariant mode
// (`[training] deterministic = "layout"`; LeafTrees::start below) every sum over tokens
// that a layout could split (a weight's gradient, a norm's, the embedding's, the loss) is cut
// at fixed leaves of the global batch (one sequence each, or a fixed block of a sequence's
// positions: LeafTrees::set_sequence_blocks) and taken in one canonical tree: the
// perfect binary tree over the leaves' indices in the global batch, a node with one present
// child being that child. A rank sums the leaves it holds and merges siblings as they
// complete; what is left (a few aligned blocks) goes to the other ranks, which finish the same
// tree. One process, DDP over any number of ranks and gradient accumulation in any number of
// micro-batches then produce the same bits. DDP and FSDP exchange the ranks' blocks
// (parallel/leaf_reduce.h). Tensor parallelism splits the features instead: each Linear cuts
// its sharded dimension into fixed blocks, and the sums over them are taken in the same kind
// of tree over block numbers (LeafTrees::set_feature_blocks). Context parallelism splits the
// sequences: with sequence blocks each leaf is one block of one sequence, and attention runs
// block by block (nn/blocked_attention.h). docs/TRAINING.md says what it costs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace weft::nn {

// A node of the canonical tree: leaves [first, first + count), count a power of two and first
// a multiple of it.
struct LeafBlock {
  std::int64_t first = 0, count = 1;
  bool operator==(const LeafBlock&) const = default;
};

// The canonical combination of disjoint blocks (any order) whose sums of n values each are at
// values[i], computed in those buffers: the one that holds it (null when there are none).
// bf16 (float only): each node of the tree is rounded to bfloat16 as it is formed.
template <class T>
T* combine_blocks(std::vector<LeafBlock> blocks, std::vector<T*> values, std::int64_t n,
                  bool bf16 = false);

// One sum's partial results over blocks of leaves: n values each, siblings merged as they
// arrive. With bf16 (float only; `mixed_precision_reduce = "bfloat16"`) every node of the
// tree is a bfloat16 value held in a float: a leaf's sum is rounded as it is added, and each
// merge rounds. The nodes are the same on every layout, so the exchanges between ranks move
// them as bfloat16, exactly, in half the bytes.
template <class T>
class LeafSums {
 public:
  LeafSums(T* target, std::int64_t n, bool bf16 = false) : target_(target), n_(n), bf16_(bf16) {}
  T* target() const { return target_; }
  std::int64_t size() const { return n_; }
  bool bf16() const { return bf16_; }
  // A buffer for the next leaf's sum, zero-filled unless the caller overwrites it, which
  // add() then takes.
  T* open(bool zeroed = true);
  void add(std::int64_t leaf) { add(LeafBlock{leaf, 1}); }
  // The opened buffer as the sum of a whole block (received from another rank; with bf16,
  // rounded, which leaves a bfloat16 node as it is).
  void add(LeafBlock block);
  // The gradient moved (FSDP frees and restores its full gradients).
  void retarget(T* target) { target_ = target; }
  const std::vector<LeafBlock>& blocks() const { return blocks_; }
  const T* values(std::size_t i) const { return values_[i].get(); }
  // Bytes of the partial sums held and kept for reuse.
  std::int64_t bytes() const;
  // target += the canonical combination of what was added (nothing when nothing was).
  void add_into_target();
  void clear();
  // clear(), and the buffers kept for reuse freed too.
  void release();

 private:
  T* target_;
  std::int64_t n_;
  bool bf16_;
  std::vector<LeafBlock> blocks_;
  std::vector<std::unique_ptr<T[]>> values_, spare_;
  std::unique_ptr<T[]> opened_;
};

// A model's sums over tokens in the invariant mode: where the rows it is given sit among the
// leaves, and one LeafSums per gradient and user (a tied weight's two layers add their trees
// to it one after the other), made on first use, in the order of first use (the same on every
// rank), plus one for the loss.
class LeafTrees {
 public:
  // The rows a forward and backward gets from now on are those of whole sequences,
  // `sequence_rows` rows of each on this rank, the first of them sequence `first_sequence` of
  // the global batch of `sequences`; each sequence's leaves are its set_sequence_blocks()
  // blocks of positions (leaf_at says how they are numbered). Until then (and after stop())
  // nothing is recorded: an evaluation's loss is not a training sum.
  void start(std::int64_t first_sequence, std::int64_t sequence_rows, std::int64_t sequences);
  void stop() { active_ = false; }
  bool active() const { return active_; }
  std::int64_t first_sequence() const { return first_sequence_; }
  std::int64_t sequences() const { return sequences_; }
  std::int64_t leaf_rows() const { return leaf_rows_; }
  // fn(leaf, first_row) for the leaves of `rows` rows (whole sequences of whole leaves, else
  // InvalidArgument naming both), in the leaves' order (so that siblings merge as they come).
  template <class Fn>
  void for_each_leaf(std::int64_t rows, Fn&& fn) const {
    for (const auto& [leaf, block] : leaves_of(rows)) fn(leaf, block * leaf_rows_);
  }
  // (leaf, i) for the i-th block of leaf_rows() rows of `rows` rows (whole sequences), by
  // leaf: the order in which a sum takes them.
  std::vector<std::pair<std::int64_t, std::int64_t>> leaves_of(std::int64_t rows) const;
  // Layout-invariant context parallelism: each sequence cut into `blocks` fixed blocks of
  // positions (a power of two; 1, the default: whole sequences), and a rank's rows laid out as
  // context parallelism lays them out (rank `cp_rank` of `cp_size` holding chunks cp_rank and
  // 2 x cp_size - 1 - cp_rank of every sequence, nn/context_parallel.h), each chunk whole
  // blocks. Attention then runs block by block (nn/blocked_attention.h).
  void set_sequence_blocks(int blocks, int cp_rank = 0, int cp_size = 1);
  int sequence_blocks() const { return sequence_blocks_; }
  // Whether attention runs in sequence blocks now (only while active).
  bool sequence_blocked() const { return active_ && sequence_blocks_ > 1; }
  // Layout-invariant tensor parallelism: each Linear cuts its weight's sharded dimension
  // (Sharding::dim) into `blocks` fixed blocks of features, a tensor-parallel rank holding
  // blocks / parts of them, runs a product per block and sums the products over blocks in the
  // canonical tree over them (Linear says how). 1, the default: whole products.
  void set_feature_blocks(int blocks);
  int feature_blocks() const { return feature_blocks_; }
  // Whether products are cut into feature blocks now (only while active).
  bool blocked() const { return active_ && feature_blocks_ > 1; }
  // The sum over feature blocks of one product's terms, n values each, cleared; its buffers
  // kept for the next product of that size (the products run one at a time).
  LeafSums<float>& feature_sums(std::int64_t n);
  // Gradient sums in bfloat16 nodes (LeafSums' bf16: `mixed_precision_reduce = "bfloat16"`),
  // or float32 ones (the default). Set between steps: the gradient sums made so far are
  // dropped (made again on first use).
  void set_bf16_gradients(bool on);
  bool bf16_gradients() const { return bf16_gradients_; }
  // The sum `user` (a layer) adds its gradient's leaves to, now at `target`. A gradient two
  // users share (a tied weight) gets their two sums added in the order of first use, which
  // schedules change: with two terms (and a zeroed target) the order gives the same bits.
  LeafSums<float>& of(const void* user, float* target, std::int64_t n);
  LeafSums<double>& loss() { return loss_; }
  const std::vector<std::unique_ptr<LeafSums<float>>>& all() const { return trees_; }
  // Every sum added to its target, in order: one process.
  void add_into_targets();
  // Bytes of every sum's partial sums, held and kept for reuse.
  std::int64_t bytes() const;
  void clear();  // a new step

 private:
  std::int64_t check_rows(std::int64_t rows) const;
  // The leaf of row block i of n.
  std::int64_t leaf_at(std::int64_t i, std::int64_t n) const;

  bool active_ = false, bf16_gradients_ = false;
  int feature_blocks_ = 1, sequence_blocks_ = 1, cp_rank_ = 0, cp_size_ = 1;
  std::int64_t first_sequence_ = 0, sequence_rows_ = 1, leaf_rows_ = 1, sequences_ = 1;
  std::vector<std::unique_ptr<LeafSums<float>>> trees_;
  std::vector<const void*> users_;
  std::map<std::int64_t, std::unique_ptr<LeafSums<float>>> feature_sums_;
  std::unique_ptr<double> loss_sum_ = std::make_unique<double>(0.0);
  LeafSums<double> loss_{loss_sum_.get(), 1};
};

}  // namespace weft::nn
