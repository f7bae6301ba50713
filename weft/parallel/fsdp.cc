#include "weft/parallel/fsdp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "weft/base/error.h"
#include "weft/kernels/convert.h"
#include "weft/kernels/elementwise.h"
#include "weft/kernels/parallel.h"
#include "weft/nn/layers.h"
#include "weft/parallel/checks.h"
#include "weft/parallel/leaf_reduce.h"
#include "weft/recorder/flight_recorder.h"

namespace weft::parallel {

// One parameter's place in its unit. Rank r holds rows [r * shard_rows, ...) of it, rows_of(r)
// of them, at `offset` in its block of the unit; the block is laid out alike on every rank.
//
// In a bfloat16 gather (set_param_dtype) a rank's block is laid out anew: the bf16 pieces
// (the weights only products read) first, two to a float-sized word, then the others in
// float32; `packed` is a piece's place there, in bf16 elements for the first and in words for
// the others.
struct FullyShardedDataParallel::Piece {
  nn::Parameter* param;
  std::int64_t rows, cols, shard_rows, offset;
  bool bf16 = false;
  std::int64_t packed = 0;

  std::int64_t rows_of(int rank) const {
    return std::clamp<std::int64_t>(rows - rank * shard_rows, 0, shard_rows);
  }
  std::int64_t size() const { return shard_rows * cols; }  // padded, per rank
  // Rank r's rows: from the full tensor into a run of its shard, and back.
  void to_run(int rank, const float* full, float* run) const {
    if (const std::size_t n = bytes_of(rank)) std::memcpy(run, full + first(rank), n);
  }
  void to_full(int rank, const float* run, float* full) const {
    if (const std::size_t n = bytes_of(rank)) std::memcpy(full + first(rank), run, n);
  }
  std::int64_t first(int rank) const { return rank * shard_rows * cols; }  // in the full tensor
  // Every rank's rows, between the full tensor and rank-major blocks of `stride` elements.
  void pack(const float* full, float* blocks, std::int64_t stride, int ranks) const {
    for (int r = 0; r < ranks; ++r) to_run(r, full, blocks + r * stride + offset);
  }
  void unpack(const float* blocks, float* full, std::int64_t stride, int ranks) const {
    for (int r = 0; r < ranks; ++r) to_full(r, blocks + r * stride + offset, full);
  }

 private:
  // No pointer into `full` is formed for a rank past the last row (it holds padding only).
  std::size_t bytes_of(int rank) const {
    return static_cast<std::size_t>(rows_of(rank) * cols) * sizeof(float);
  }
};

// The parameters gathered, freed and reduced together: a transformer block, or the root.
struct FullyShardedDataParallel::Unit {
  std::vector<Piece> pieces;
  std::vector<Storage*> values, grads;  // distinct storages behind the pieces' tensors
  std::int64_t offset = 0, size = 0;    // the unit's run of a rank's shard
  std::int64_t full_bytes = 0;          // bytes of the full parameters (and of the grads)
  bool current = true;                  // the full parameters are resident and up to date
  bool in_backward = false;             // pipelined: between its first and last backward
  std::int64_t packed_size = 0;         // words of a rank's block in a bfloat16 gather
  bool has_bf16 = false;                // a piece that a bfloat16 gather rounds
  MappedVector<float> gathered;         // every rank's block, while a gather is in flight
  MappedVector<float> packed;           // this rank's block rounded, for a bfloat16 gather
  bool gathered_bf16 = false;           // the gather in flight is a bfloat16 one
  std::shared_ptr<dist::Work> gather;
  // Layout-invariant mode: the blocks of leaves' sums of this rank's shard of the unit, one
  // sum per user of a piece's gradient (a tied weight has two, added one after the other).
  std::vector<std::unique_ptr<nn::LeafSums<float>>> leaf_blocks;
};

// A unit's gradients on their way through reduce_scatter into the gradient shards.
struct FullyShardedDataParallel::Reduction {
  Unit* unit;
  // float32: send and recv are reduced. bfloat16: send is rounded into send16 and given back,
  // and recv16 is received; both hold two bf16 values to a float (pooled float buffers).
  MappedVector<float> send, recv, send16, recv16;
  std::shared_ptr<dist::Work> work;
};

namespace {

// "root", "layers.3": the flight recorder's name for unit `u` (units: [0] the root, [1 + l]
// block l).
template <typename Units, typename Unit>
std::string unit_name(const Units& units, const Unit& u) {
  const auto at =
      std::find_if(units.begin(), units.end(), [&](const auto& unit) { return unit.get() == &u; }) -
      units.begin();
  return at == 0 ? "root" : "layers." + std::to_string(at - 1);
}

// A pooled float buffer as the bfloat16 array it holds (two values to a float).
BFloat16* bf16_in(MappedVector<float>& buffer) {
  return reinterpret_cast<BFloat16*>(buffer.data());
}
dist::Buffer bf16_buffer(MappedVector<float>& buffer, std::int64_t n) {
  return dist::Buffer(buffer.data(), static_cast<std::size_t>(n), DType::kBFloat16);
}

// into[i] += x[i], x widened in slices that stay in L1.
void add_widened(const BFloat16* x, float* into, std::int64_t n) {
  kernels::parallel_for(n, 1 << 14, [&](std::int64_t first, std::int64_t end) {
    float wide[1024];
    for (std::int64_t i = first; i < end; i += 1024) {
      const std::int64_t len = std::min<std::int64_t>(1024, end - i);
      kernels::to_float(x + i, wide, len);
      for (std::int64_t j = 0; j < len; ++j) into[i + j] += wide[j];
    }
  });
}

void add_distinct(std::vector<Storage*>& storages, Storage* s) {
  if (std::find(storages.begin(), storages.end(), s) == storages.end()) storages.push_back(s);
}

std::int64_t bytes_of(std::int64_t floats) {
  return floats * static_cast<std::int64_t>(sizeof(float));
}

const Tensor& find(const nn::StateDict& state, const std::string& name, const Shape& shape,
                   const char* what) {
  for (const auto& [n, t] : state) {
    if (n != name) continue;
    if (t.shape() != shape || t.dtype() != DType::kFloat32) {
      throw InvalidArgument(std::string("FSDP: ") + what + " " + name + " is " +
                            std::string(dtype_name(t.dtype())) + " " + shape_string(t.shape()) +
                            ", the model's is float32 " + shape_string(shape));
    }
    return t;
  }
  throw InvalidArgument(std::string("FSDP: the state has no ") + what + " " + name);
}

}  // namespace

ShardingMode parse_sharding_mode(const std::string& name) {
  if (name == "zero1") return ShardingMode::kZero1;
  if (name == "zero2") return ShardingMode::kZero2;
  if (name == "full_shard") return ShardingMode::kFullShard;
  throw InvalidArgument("FSDP mode '" + name + "': use zero1, zero2 or full_shard");
}

const char* sharding_mode_name(ShardingMode mode) {
  switch (mode) {
    case ShardingMode::kZero1:
      return "zero1";
    case ShardingMode::kZero2:
      return "zero2";
    case ShardingMode::kFullShard:
      return "full_shard";
  }
  return "?";
}

FullyShardedDataParallel::FullyShardedDataParallel(nn::Llama& model, dist::ProcessGroup& shard,
                                                   dist::ProcessGroup* replicate, ShardingMode mode,
                                                   nn::AdamWOptions optimizer)
    : model_(model),
      shard_(shard),
      replicate_(replicate),
      mode_(mode),
      options_(optimizer),
      ranks_(shard.size()),
      rank_(shard.rank()) {
  if (debug_checks_enabled()) {
    check_parameters_identical(model_.parameters(), shard_);
    if (replicate_ != nullptr) check_parameters_identical(model_.parameters(), *replicate_);
  }
  for (std::int64_t u = 0; u <= model_.config().n_layers; ++u) {
    units_.push_back(std::make_unique<Unit>());
  }
  for (const auto& p : model_.parameters().all()) {
    Unit& u = unit_for(model_.unit_of(p->name));
    const std::int64_t rows = p->value.ndim() == 0 ? 1 : p->value.size(0);
    const std::int64_t cols = rows == 0 ? 0 : p->value.numel() / rows;
    u.pieces.push_back({p.get(), rows, cols, (rows + ranks_ - 1) / ranks_, u.size});
    u.size += u.pieces.back().size();
    u.full_bytes += static_cast<std::int64_t>(p->value.nbytes());
    add_distinct(u.values, p->value.storage());
    add_distinct(u.grads, p->grad.storage());
  }
  for (auto& u : units_) {
    u->offset = shard_size_;
    shard_size_ += u->size;
    lay_out_bf16_gather(*u);
  }
  values_.assign(static_cast<std::size_t>(shard_size_), 0.0f);
  grads_.assign(values_.size(), 0.0f);
  exp_avg_.assign(values_.size(), 0.0f);
  exp_avg_sq_.assign(values_.size(), 0.0f);
  for (auto& u : units_) {
    for (const Piece& p : u->pieces) {
      p.to_run(rank_, p.param->value.data<float>(), values_.data() + u->offset + p.offset);
    }
    if (mode_ == ShardingMode::kFullShard) {
      for (Storage* s : u->values) s->release();
      u->current = false;
    }
    if (mode_ != ShardingMode::kZero1) {
      for (Storage* s : u->grads) s->release();
    }
  }
  hooks_ = model_.add_unit_hooks({
      .before_forward = [this](int u) { before_forward(u); },
      .after_forward = [this](int u) { after_forward(u); },
      .before_backward = [this](int u) { before_backward(u); },
      .after_backward = [this](int u) { after_backward(u); },
  });
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  model_.remove_unit_hooks(hooks_);
  // The buffers must outlive the operations, each of them; their errors were reported to
  // the callers already (a destructor cannot).
  auto settle = [](const std::shared_ptr<dist::Work>& work) {
    try {
      if (work) work->wait();
    } catch (const std::exception&) {
    }
  };
  for (auto& u : units_) settle(u->gather);
  for (auto& r : reductions_) settle(r->work);
}

// Model units -1 (embedding) and n_layers (final norm, output) form the root, units_[0].
FullyShardedDataParallel::Unit& FullyShardedDataParallel::unit_for(int model_unit) const {
  const int layers = static_cast<int>(model_.config().n_layers);
  const int index = model_unit < 0 || model_unit >= layers ? 0 : model_unit + 1;
  return *units_[static_cast<std::size_t>(index)];
}

// Gathers and reductions reuse their buffers from step to step: a fresh mapping of a few MiB
// costs a page fault per 4 KiB each time. A request takes the smallest spare that holds it.
// Where none does, spares are dropped (to the mappings, which keep them for their size) until
// the new buffer fits within the most ever held: spares never raise the buffers' peak above
// what those in use reach, which is what weft/estimate counts. Spares kept regardless raised
// it; buffers left to the mappings alone, kept by exact size, were evicted and mapped again
// every step under PP x FSDP (docs/ESTIMATE.md, "How close to the measured peak and step").
MappedVector<float> FullyShardedDataParallel::take_buffer(std::size_t n) {
  auto best = spare_.end();
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    if (it->capacity() >= n && (best == spare_.end() || it->capacity() < best->capacity()))
      best = it;
  }
  MappedVector<float> b;
  if (best != spare_.end()) {
    b = std::move(*best);
    spare_.erase(best);
  } else {
    while (!spare_.empty() && buffers_.in_use + spare_floats() + n > buffers_.peak)
      spare_.erase(spare_.begin());
    ++buffers_.made;
  }
  b.assign(n, 0.0f);
  buffers_.in_use += b.capacity();
  buffers_.in_use_peak = std::max(buffers_.in_use_peak, buffers_.in_use);
  buffers_.peak = std::max(buffers_.peak, buffers_.in_use + spare_floats());
  return b;
}

void FullyShardedDataParallel::give_back(MappedVector<float>&& buffer) {
  buffers_.in_use -= buffer.capacity();
  MappedVector<float> spare = std::move(buffer);
  if (spare_.size() < kSpareBuffers) spare_.push_back(std::move(spare));
}

std::size_t FullyShardedDataParallel::spare_floats() const {
  std::size_t n = 0;
  for (const auto& b : spare_) n += b.capacity();
  return n;
}

void FullyShardedDataParallel::count_unsharded(std::int64_t bytes) {
  unsharded_ += bytes;
  unsharded_peak_ = std::max(unsharded_peak_, unsharded_);
}

void FullyShardedDataParallel::lay_out_bf16_gather(Unit& u) {
  std::int64_t halves = 0, words = 0;
  for (Piece& p : u.pieces) {
    p.bf16 = p.param->product_operand;
    u.has_bf16 = u.has_bf16 || p.bf16;
    p.packed = p.bf16 ? halves : words;
    (p.bf16 ? halves : words) += p.size();
  }
  const std::int64_t first = (halves + 1) / 2;  // the float32 pieces start after the bf16 ones
  for (Piece& p : u.pieces) p.packed += p.bf16 ? 0 : first;
  u.packed_size = first + words;
}

// This rank's block into u.packed: the bf16 pieces rounded, the others copied.
void FullyShardedDataParallel::pack_bf16(Unit& u) {
  u.packed = take_buffer(static_cast<std::size_t>(u.packed_size));
  const float* block = values_.data() + u.offset;
  for (const Piece& p : u.pieces) {
    if (p.bf16) {
      kernels::to_bfloat16(block + p.offset, bf16_in(u.packed) + p.packed, p.size());
    } else {
      std::copy(block + p.offset, block + p.offset + p.size(), u.packed.data() + p.packed);
    }
  }
}

void FullyShardedDataParallel::start_gather(Unit& u) {
  if (u.current || u.gather) return;
  // Only while the products read bf16: float32 products would read the rounded weights.
  u.gathered_bf16 =
      param_dtype_ == DType::kBFloat16 && u.has_bf16 && nn::matmul_dtype() == DType::kBFloat16;
  const std::int64_t block = u.gathered_bf16 ? u.packed_size : u.size;
  u.gathered = take_buffer(static_cast<std::size_t>(block * ranks_));
  count_unsharded(bytes_of(block * ranks_));
  std::span<float> mine(values_.data() + u.offset, static_cast<std::size_t>(u.size));
  if (u.gathered_bf16) {
    pack_bf16(u);
    count_unsharded(bytes_of(block));
    mine = u.packed;
  }
  const recorder::FlightRecorder::Site site("FSDP gather " + unit_name(units_, u));
  u.gather = shard_.all_gather_async(u.gathered, mine);
}

void FullyShardedDataParallel::finish_gather(Unit& u) {
  if (u.current) return;
  start_gather(u);
  u.gather->wait();
  u.gather.reset();
  if (mode_ == ShardingMode::kFullShard) {
    for (Storage* s : u.values) s->restore();
    count_unsharded(u.full_bytes);
  }
  const std::int64_t block = u.gathered_bf16 ? u.packed_size : u.size;
  for (const Piece& p : u.pieces) {
    float* full = p.param->value.data<float>();
    if (!u.gathered_bf16) {
      p.unpack(u.gathered.data(), full, u.size, ranks_);
      continue;
    }
    for (int r = 0; r < ranks_; ++r) {  // widened: the products round them back to the same bf16
      const float* from = u.gathered.data() + r * block;
      const std::int64_t n = p.rows_of(r) * p.cols;
      if (n == 0) continue;
      if (p.bf16) {
        kernels::to_float(reinterpret_cast<const BFloat16*>(from) + p.packed, full + p.first(r), n);
      } else {
        std::copy(from + p.packed, from + p.packed + n, full + p.first(r));
      }
    }
  }
  if (u.gathered_bf16) {
    count_unsharded(-bytes_of(block));
    give_back(std::move(u.packed));
  }
  count_unsharded(-bytes_of(block * ranks_));
  give_back(std::move(u.gathered));
  u.current = true;
}

void FullyShardedDataParallel::free_parameters(Unit& u) {
  if (mode_ != ShardingMode::kFullShard || !u.current) return;
  for (Storage* s : u.values) s->release();
  count_unsharded(-u.full_bytes);
  u.current = false;
}

void FullyShardedDataParallel::before_forward(int model_unit) {
  const int layers = static_cast<int>(model_.config().n_layers);
  if (pipelined_) {  // each unit as it comes; the root may lack the embedding here
    finish_gather(unit_for(model_unit));
    return;
  }
  if (model_unit == layers) return;  // the root's second half: gathered with the embedding
  finish_gather(unit_for(model_unit));
  // Prefetch: the next block's parameters travel while this unit computes.
  if (model_unit + 1 < layers) start_gather(unit_for(model_unit + 1));
}

void FullyShardedDataParallel::after_forward(int model_unit) {
  if (pipelined_) return;  // kept for the other micro-batches
  Unit& u = unit_for(model_unit);
  if (&u != units_[0].get()) free_parameters(u);  // the root stays for the backward
}

void FullyShardedDataParallel::before_backward(int model_unit) {
  const int layers = static_cast<int>(model_.config().n_layers);
  if (pipelined_) {
    pipelined_before_backward(unit_for(model_unit));
    return;
  }
  if (model_unit < 0) return;  // the embedding: the root is there since before_backward(layers)
  Unit& u = unit_for(model_unit);
  finish_gather(u);
  if (mode_ != ShardingMode::kZero1) {
    for (Storage* s : u.grads) s->restore();  // zero-filled
    count_unsharded(u.full_bytes);
  }
  const int next = model_unit == layers ? layers - 1 : model_unit - 1;
  if (next >= 0) start_gather(unit_for(next));
}

void FullyShardedDataParallel::pipelined_before_backward(Unit& u) {
  finish_gather(u);
  if (u.in_backward) return;
  u.in_backward = true;
  if (mode_ == ShardingMode::kZero1) return;  // its full gradients stay between steps
  for (Storage* s : u.grads) s->restore();    // zero-filled, then summed over the micro-batches
  count_unsharded(u.full_bytes);
}

// After the unit's last backward of the step. The root's is its embedding's when this rank
// holds the embedding (the V schedule puts the output layer on the same rank, and its
// backward comes first).
void FullyShardedDataParallel::pipelined_after_backward(int model_unit) {
  if (held_) return;
  const int layers = static_cast<int>(model_.config().n_layers);
  if (model_unit == layers && model_.stages().front().first == 0) return;
  end_backward(unit_for(model_unit));
}

void FullyShardedDataParallel::end_backward(Unit& u) {
  if (mode_ != ShardingMode::kZero1 || syncing_) start_reduction(u);
  u.in_backward = false;
  free_parameters(u);
}

void FullyShardedDataParallel::reduce_held() {
  for (auto& u : units_) {
    if (u->in_backward) end_backward(*u);
  }
}

void FullyShardedDataParallel::after_backward(int model_unit) {
  if (pipelined_) {
    pipelined_after_backward(model_unit);
    return;
  }
  const int layers = static_cast<int>(model_.config().n_layers);
  if (model_unit == layers) return;  // the root's gradients are final after the embedding
  Unit& u = unit_for(model_unit);
  if (mode_ != ShardingMode::kZero1 || syncing_) start_reduction(u);
  free_parameters(u);
}

void FullyShardedDataParallel::start_reduction(Unit& u) {
  if (layout_invariant_) {
    exchange_leaf_blocks(u);
    if (mode_ != ShardingMode::kZero1) {
      for (Storage* s : u.grads) s->release();
      count_unsharded(-u.full_bytes);
    }
    return;
  }
  auto r = std::make_unique<Reduction>();
  r->unit = &u;
  const std::size_t full = static_cast<std::size_t>(u.size * ranks_);
  r->send = take_buffer(full);  // the padding stays zero
  count_unsharded(bytes_of(u.size * ranks_));
  for (const Piece& p : u.pieces) {
    p.pack(p.param->grad.data<float>(), r->send.data(), u.size, ranks_);
  }
  if (mode_ != ShardingMode::kZero1) {
    for (Storage* s : u.grads) s->release();
    count_unsharded(-u.full_bytes);
  }
  const recorder::FlightRecorder::Site site("FSDP reduce_scatter " + unit_name(units_, u));
  if (reduce_dtype_ == DType::kBFloat16) {
    r->send16 = take_buffer((full + 1) / 2);
    r->recv16 = take_buffer((static_cast<std::size_t>(u.size) + 1) / 2);
    count_unsharded(bytes_of(u.size * (ranks_ + 1)) / 2);
    kernels::to_bfloat16_threaded(r->send.data(), bf16_in(r->send16),
                                  static_cast<std::int64_t>(full));
    give_back(std::move(r->send));
    count_unsharded(-bytes_of(u.size * ranks_));
    r->work = shard_.reduce_scatter_async(bf16_buffer(r->recv16, u.size),
                                          bf16_buffer(r->send16, u.size * ranks_));
  } else {
    r->recv = take_buffer(static_cast<std::size_t>(u.size));
    count_unsharded(bytes_of(u.size));
    r->work = shard_.reduce_scatter_async(r->recv, r->send);
  }
  reductions_.push_back(std::move(r));
  // At most two in flight: their buffers are a unit's full gradients each.
  while (reductions_.size() > 2) finish_reduction();
}

// Retires the oldest reduction: micro-batches are summed in the order they ran.
void FullyShardedDataParallel::finish_reduction() {
  std::unique_ptr<Reduction> r = std::move(reductions_.front());
  reductions_.pop_front();
  r->work->wait();
  float* into = grads_.data() + r->unit->offset;
  const std::int64_t size = r->unit->size;
  if (reduce_dtype_ == DType::kBFloat16) {
    add_widened(bf16_in(r->recv16), into, size);
    count_unsharded(-bytes_of(size * (ranks_ + 1)) / 2);
    give_back(std::move(r->send16));
    give_back(std::move(r->recv16));
    return;
  }
  for (std::int64_t i = 0; i < size; ++i) into[i] += r->recv[static_cast<std::size_t>(i)];
  count_unsharded(-bytes_of(size * (ranks_ + 1)));
  give_back(std::move(r->send));
  give_back(std::move(r->recv));
}

void FullyShardedDataParallel::set_layout_invariant(bool on) {
  layout_invariant_ = on;
  for (auto& u : units_) u->leaf_blocks.clear();
}

// The unit's gradients are those of its pieces: a leaf sum whose gradient holds a piece's
// (a fused q|k|v or w1|w3 sum holds several) is the unit's, the n-th such sum of a piece (in
// the model's order of first use) going to the unit's n-th. Sums without blocks are left out:
// their gradients may have moved since (freed and restored elsewhere).
void FullyShardedDataParallel::exchange_leaf_blocks(Unit& u) {
  struct Source {
    const Piece* piece;
    nn::LeafSums<float>* sums;
    std::size_t user;  // of the piece's gradient
  };
  std::vector<nn::LeafSums<float>*> sums;
  std::vector<Source> sources;
  std::size_t users = 0;
  for (const Piece& p : u.pieces) {
    const auto at = reinterpret_cast<std::uintptr_t>(p.param->grad.data<float>());
    std::size_t user = 0;
    for (const auto& t : model_.parameters().leaf_trees().all()) {
      if (t->blocks().empty()) continue;
      const auto first = reinterpret_cast<std::uintptr_t>(t->target());
      if (at < first || at >= first + static_cast<std::uintptr_t>(t->size()) * sizeof(float))
        continue;
      sources.push_back({&p, t.get(), user++});
      if (std::find(sums.begin(), sums.end(), t.get()) == sums.end()) sums.push_back(t.get());
    }
    users = std::max(users, user);
  }
  const bool bf16 = model_.parameters().leaf_trees().bf16_gradients();
  while (u.leaf_blocks.size() < users) {
    u.leaf_blocks.push_back(
        std::make_unique<nn::LeafSums<float>>(grads_.data() + u.offset, u.size, bf16));
  }
  // Before the data: every rank's count of blocks (the most of them sizes the exchange), and
  // the ranks' agreement on the number of users, which sizes it too.
  const auto all =
      blocks_of_all(shard_, std::vector<const nn::LeafSums<float>*>(sums.begin(), sums.end()),
                    static_cast<std::int64_t>(users));
  const std::size_t mine = sums.empty() ? 0 : sums[0]->blocks().size();
  const auto entries = static_cast<std::int64_t>(all[0].size());
  const auto per_user = entries * u.size;
  // To rank r: [user][entry][its rows of the unit].
  const std::int64_t stride = static_cast<std::int64_t>(users) * per_user;
  MappedVector<float> send = take_buffer(static_cast<std::size_t>(stride * ranks_));
  MappedVector<float> recv = take_buffer(send.size());
  count_unsharded(2 * bytes_of(stride * ranks_));
  for (std::int64_t e = 0; e < static_cast<std::int64_t>(mine); ++e) {
    for (const Source& s : sources) {
      const float* whole = s.sums->values(static_cast<std::size_t>(e)) +
                           (s.piece->param->grad.data<float>() - s.sums->target());
      s.piece->pack(whole, send.data() + static_cast<std::int64_t>(s.user) * per_user + e * u.size,
                    stride, ranks_);
    }
  }
  if (bf16) {  // the blocks' values are bfloat16: sent as such, in half the bytes
    const std::int64_t n = stride * ranks_;
    MappedVector<float> send16 = take_buffer(static_cast<std::size_t>(n + 1) / 2);
    count_unsharded(bytes_of(n) / 2);
    kernels::to_bfloat16_threaded(send.data(), bf16_in(send16), n);
    shard_.all_to_all(bf16_buffer(recv, n), bf16_buffer(send16, n));
    count_unsharded(-bytes_of(n) / 2);
    give_back(std::move(send16));
  } else {
    shard_.all_to_all(recv, send);
  }
  for (int r = 0; r < ranks_; ++r) {
    for (std::size_t user = 0; user < users; ++user) {
      for (std::int64_t e = 0; e < entries; ++e) {
        const nn::LeafBlock block = all[static_cast<std::size_t>(r)][static_cast<std::size_t>(e)];
        if (block.count == 0) continue;
        const std::int64_t at =
            r * stride + static_cast<std::int64_t>(user) * per_user + e * u.size;
        float* to = u.leaf_blocks[user]->open(/*zeroed=*/false);
        if (bf16) {
          kernels::to_float(bf16_in(recv) + at, to, u.size);
        } else {
          std::copy(recv.data() + at, recv.data() + at + u.size, to);
        }
        u.leaf_blocks[user]->add(block);
      }
    }
  }
  // zero2 and full_shard hold no full gradients between units: nor do their sums.
  for (nn::LeafSums<float>* t : sums) {
    if (mode_ == ShardingMode::kZero1) {
      t->clear();
    } else {
      t->release();
    }
  }
  count_unsharded(-2 * bytes_of(stride * ranks_));
  give_back(std::move(send));
  give_back(std::move(recv));
}

// The shard's blocks (with HSDP, every replica's: all-gathered) combined into its gradients,
// one user's sums after the other's, as one process adds them. A piece with fewer users has
// zeros in the others' sums: adding +0 leaves every sum of the first unchanged (none is -0).
void FullyShardedDataParallel::combine_leaf_blocks(Unit& u) {
  for (auto& user : u.leaf_blocks) combine_leaf_blocks(u, *user);
}

void FullyShardedDataParallel::combine_leaf_blocks(Unit& u, nn::LeafSums<float>& sums) {
  if (replicate_ == nullptr) {
    sums.add_into_target();
    return;
  }
  const std::vector<nn::LeafBlock> mine = sums.blocks();
  const auto all = blocks_of_all(*replicate_, mine);
  const std::size_t size = static_cast<std::size_t>(u.size), entries = all[0].size();
  MappedVector<float> local = take_buffer(entries * size);  // zeros past this rank's blocks
  MappedVector<float> gathered = take_buffer(local.size() * all.size());
  for (std::size_t e = 0; e < mine.size(); ++e)
    std::copy(sums.values(e), sums.values(e) + size, local.data() + e * size);
  if (sums.bf16()) {  // bfloat16 values: gathered as such, in half the bytes, and widened
    const auto n = static_cast<std::int64_t>(local.size()),
               all_n = n * static_cast<std::int64_t>(all.size());
    MappedVector<float> local16 = take_buffer(static_cast<std::size_t>(n + 1) / 2);
    MappedVector<float> gathered16 = take_buffer(static_cast<std::size_t>(all_n + 1) / 2);
    kernels::to_bfloat16_threaded(local.data(), bf16_in(local16), n);
    replicate_->all_gather(bf16_buffer(gathered16, all_n), bf16_buffer(local16, n));
    kernels::to_float_threaded(bf16_in(gathered16), gathered.data(), all_n);
    give_back(std::move(local16));
    give_back(std::move(gathered16));
  } else {
    replicate_->all_gather(gathered, local);
  }
  if (const float* sum = combine_gathered(all, gathered.data(), u.size, u.size, sums.bf16())) {
    float* into = grads_.data() + u.offset;
    for (std::size_t i = 0; i < size; ++i) into[i] += sum[i];
  }
  sums.clear();
  give_back(std::move(local));
  give_back(std::move(gathered));
}

void FullyShardedDataParallel::set_param_dtype(DType dtype) {
  if (dtype != DType::kFloat32 && dtype != DType::kBFloat16) {
    throw InvalidArgument("FSDP gathers parameters in float32 or bfloat16, not " +
                          std::string(dtype_name(dtype)));
  }
  param_dtype_ = dtype;
}

void FullyShardedDataParallel::set_reduce_dtype(DType dtype) {
  if (dtype != DType::kFloat32 && dtype != DType::kBFloat16) {
    throw InvalidArgument("FSDP reduces gradients in float32 or bfloat16, not " +
                          std::string(dtype_name(dtype)));
  }
  reduce_dtype_ = dtype;
}

// HSDP: the shards' gradients summed across the replicas, in the reduce dtype.
void FullyShardedDataParallel::reduce_across_replicas() {
  if (reduce_dtype_ == DType::kFloat32) {
    replicate_->all_reduce(grads_);
    return;
  }
  const auto n = static_cast<std::int64_t>(grads_.size());
  MappedVector<float> grads16 = take_buffer((grads_.size() + 1) / 2);
  kernels::to_bfloat16_threaded(grads_.data(), bf16_in(grads16), n);
  replicate_->all_reduce(bf16_buffer(grads16, n));
  kernels::to_float_threaded(bf16_in(grads16), grads_.data(), n);
  give_back(std::move(grads16));
}

void FullyShardedDataParallel::init_weights(std::uint64_t seed) {
  for (auto& u : units_) {
    for (const Piece& p : u->pieces) {
      model_.init_values(p.param->name, seed, p.first(rank_), p.rows_of(rank_) * p.cols,
                         values_.data() + u->offset + p.offset);
    }
  }
  mark_stale();
}

void FullyShardedDataParallel::zero_grad() {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  for (auto& u : units_) {  // a step that failed half way leaves none behind
    for (auto& user : u->leaf_blocks) user->clear();
  }
  if (mode_ == ShardingMode::kZero1) model_.parameters().zero_grad();
}

void FullyShardedDataParallel::prepare_sync() { syncing_ = true; }

void FullyShardedDataParallel::finish_sync() {
  if (mode_ == ShardingMode::kZero1 && !syncing_) {
    throw Error(
        "FSDP zero1: finish_sync() without prepare_sync() before the last backward; "
        "the gradients were never reduced");
  }
  while (!reductions_.empty()) finish_reduction();
  if (layout_invariant_) {
    for (auto& u : units_) combine_leaf_blocks(*u);
  } else if (replicate_ != nullptr) {
    reduce_across_replicas();
  }
  syncing_ = false;
}

double FullyShardedDataParallel::clip_grad_norm(double max_norm) {
  std::vector<double> sum{kernels::sum_squares(grads_.data(), shard_size_)};
  shard_.all_reduce(sum);  // replicas hold equal shards: the shard group covers every element
  const double norm = std::sqrt(sum[0]);
  const double factor = max_norm / (norm + 1e-6);
  if (max_norm > 0 && factor < 1.0) scale_grads(static_cast<float>(factor));
  return norm;
}

double FullyShardedDataParallel::local_grad_sum_squares(
    const std::function<bool(const nn::Parameter&)>& counted) const {
  double sum = 0;  // the padding is zero: whole pieces can be summed
  for (const auto& u : units_) {
    for (const Piece& p : u->pieces) {
      if (counted(*p.param))
        sum += kernels::sum_squares(grads_.data() + u->offset + p.offset, p.size());
    }
  }
  return sum;
}

void FullyShardedDataParallel::scale_grads(float factor) {
  kernels::scale(grads_.data(), factor, shard_size_);
}

void FullyShardedDataParallel::step(double lr) {
  ++steps_;
  nn::adamw_update(values_.data(), grads_.data(), exp_avg_.data(), exp_avg_sq_.data(), shard_size_,
                   options_, lr, steps_);
  mark_stale();
}

// The shards changed: full copies go (full_shard: the root may still be gathered after a
// forward-only pass), and zero1/zero2 refresh theirs at the next forward.
void FullyShardedDataParallel::mark_stale() {
  for (auto& u : units_) {
    free_parameters(*u);
    u->current = false;
  }
}

// The model's parameters in its order, each with its unit and piece.
std::vector<
    std::pair<const FullyShardedDataParallel::Unit*, const FullyShardedDataParallel::Piece*>>
FullyShardedDataParallel::pieces_in_model_order() const {
  std::vector<std::pair<const Unit*, const Piece*>> order;
  for (const auto& param : model_.parameters().all()) {
    const Unit& u = unit_for(model_.unit_of(param->name));
    for (const Piece& p : u.pieces) {
      if (p.param == param.get()) order.emplace_back(&u, &p);
    }
  }
  return order;
}

std::pair<nn::StateDict, nn::AdamWState> FullyShardedDataParallel::full_state() {
  const bool root = rank_ == 0;
  std::vector<float> all(root ? static_cast<std::size_t>(shard_size_ * ranks_) : 0);
  nn::StateDict params;
  nn::AdamWState optimizer{{}, {}, steps_};
  const auto order = pieces_in_model_order();
  for (auto [shards, into] :
       {std::pair{&values_, &params}, std::pair{&exp_avg_, &optimizer.exp_avg},
        std::pair{&exp_avg_sq_, &optimizer.exp_avg_sq}}) {
    shard_.gather(all, *shards, 0);
    if (!root) continue;
    for (const auto& [u, p] : order) {
      Tensor full = Tensor::zeros(p->param->value.shape());
      p->unpack(all.data() + u->offset, full.data<float>(), shard_size_, ranks_);
      into->emplace_back(p->param->name, full);
    }
  }
  return {params, optimizer};
}

void FullyShardedDataParallel::load_full_state(const nn::StateDict& params,
                                               const nn::AdamWState& optimizer) {
  // Every tensor is found and checked before anything is copied: a bad state changes nothing.
  struct Source {
    const Unit* unit;
    const Piece* piece;
    const float *value, *exp_avg, *exp_avg_sq;
  };
  std::vector<Source> sources;
  for (const auto& [u, p] : pieces_in_model_order()) {
    const std::string& name = p->param->name;
    const Shape& shape = p->param->value.shape();
    sources.push_back({u, p, find(params, name, shape, "parameter").data<float>(),
                       find(optimizer.exp_avg, name, shape, "exp_avg").data<float>(),
                       find(optimizer.exp_avg_sq, name, shape, "exp_avg_sq").data<float>()});
  }
  const std::size_t expected = sources.size();
  if (params.size() != expected || optimizer.exp_avg.size() != expected ||
      optimizer.exp_avg_sq.size() != expected) {
    throw InvalidArgument("FSDP: the state has " + std::to_string(params.size()) + " parameters, " +
                          std::to_string(optimizer.exp_avg.size()) + " and " +
                          std::to_string(optimizer.exp_avg_sq.size()) + " moments; the model has " +
                          std::to_string(expected));
  }
  for (const Source& s : sources) {
    const std::int64_t at = s.unit->offset + s.piece->offset;
    s.piece->to_run(rank_, s.value, values_.data() + at);
    s.piece->to_run(rank_, s.exp_avg, exp_avg_.data() + at);
    s.piece->to_run(rank_, s.exp_avg_sq, exp_avg_sq_.data() + at);
  }
  mark_stale();
  steps_ = optimizer.steps;
}

std::vector<FullyShardedDataParallel::ShardRows> FullyShardedDataParallel::shard_rows() {
  std::vector<ShardRows> rows;
  for (const auto& [u, p] : pieces_in_model_order()) {
    const std::int64_t n = p->rows_of(rank_);
    if (n == 0) continue;
    const std::int64_t at = u->offset + p->offset;
    rows.push_back({p->param, rank_ * p->shard_rows, n, p->cols, values_.data() + at,
                    exp_avg_.data() + at, exp_avg_sq_.data() + at, grads_.data() + at});
  }
  return rows;
}

void FullyShardedDataParallel::shards_loaded(std::int64_t steps) {
  mark_stale();
  steps_ = steps;
}

ShardedMemory FullyShardedDataParallel::memory() const {
  const std::int64_t shard = bytes_of(shard_size_), full = bytes_of(model_.parameters().numel());
  ShardedMemory m;
  m.parameters = shard + (mode_ == ShardingMode::kFullShard ? 0 : full);
  m.gradients = shard + (mode_ == ShardingMode::kZero1 ? full : 0);
  m.optimizer = 2 * shard;
  m.unsharded_peak = unsharded_peak_;
  m.spare_buffers = bytes_of(static_cast<std::int64_t>(spare_floats()));
  m.buffers_peak = bytes_of(static_cast<std::int64_t>(buffers_.peak));
  m.buffers_in_use_peak = bytes_of(static_cast<std::int64_t>(buffers_.in_use_peak));
  m.buffers_made = buffers_.made;
  for (const auto& u : units_) {
    for (const auto& user : u->leaf_blocks) m.leaf_blocks += user->bytes();
  }
  m.one_process = 4 * full;
  return m;
}

}  // namespace weft::parallel
