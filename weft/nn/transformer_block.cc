#include "weft/nn/transformer_block.h"

#include <cstring>
#include <string>

namespace weft::nn {
namespace {

std::string prefix(int layer, const char* part) {
  return "layers." + std::to_string(layer) + "." + part;
}

// A tensor-parallel region's backward: the output gradient gathered (sequence parallelism),
// the input gradient computed and its reduction started, and the weight gradient of the
// column-parallel product computed while that reduction, and the gather of the region's
// input it needs, travel. dh gets this rank's rows of the input gradient. The input is the
// norm's output, float32 or bfloat16 (mixed precision, gathered as such).
// A deferred weight gradient copies the gathered input, a buffer the next gather reuses.
template <class Region>
void region_backward(TensorParallelContext& tp, Region& region, float* dx, const Tensor& input,
                     float* dh, std::int64_t batch, std::int64_t seq, std::int64_t dim,
                     DeferredWeightGrads* deferred) {
  const std::int64_t rows = batch * seq;
  const float* dout = tp.gather(static_cast<const float*>(dx), rows, dim, 1);
  visit_operand(input, [&](auto* mine) {
    TensorParallelContext::Transfer x = tp.gather_async(mine, rows, dim, 0);
    float* part = tp.partial(rows, dim);
    region.backward_input(dout, part, batch, seq, deferred);
    TensorParallelContext::Transfer reduced = tp.reduce_async(part, rows, dim, dh);
    region.backward_weight(static_cast<decltype(mine)>(x.wait()), rows, deferred,
                           tp.plan().sequence_sharded());
    reduced.wait();
  });
}

// The feed-forward's backward as region_backward calls it.
struct FeedForwardRegion {
  FeedForward& ffn;
  void backward_input(const float* dout, float* dx, std::int64_t batch, std::int64_t seq,
                      DeferredWeightGrads* deferred) {
    ffn.backward_input(dout, dx, batch * seq, deferred);
  }
  template <class X>
  void backward_weight(const X* x, std::int64_t rows, DeferredWeightGrads* deferred, bool copy_x) {
    ffn.backward_weight(x, rows, deferred, copy_x);
  }
};

// A norm's backward, dx added to: under sequence parallelism in the layout-invariant mode its
// leaves' weight gradients gathered over the group, else added to `partial` (null: the grad).
void norm_backward(TensorParallelContext& tp, RMSNorm& norm, const float* dy, const float* x,
                   const float* rstd, float* dx, std::int64_t local, float* partial) {
  if (tp.plan().sequence_sharded() && norm.sums_leaves()) {
    norm.backward_sequence_sharded(dy, x, rstd, dx, local, /*accumulate_dx=*/true, tp.plan().size(),
                                   tp.gather_floats());
    return;
  }
  norm.backward(dy, x, rstd, dx, local, /*accumulate_dx=*/true, partial);
}

}  // namespace

TransformerBlock::TransformerBlock(ParameterList& params, int layer, const BlockConfig& c,
                                   TensorParallelContext& tp, const ContextParallel& cp,
                                   BlockScratch& scratch)
    : dim_(c.attention.dim),
      tp_(tp),
      scratch_(scratch),
      attention_norm_(params, prefix(layer, "attention_norm"), dim_, c.norm_eps),
      ffn_norm_(params, prefix(layer, "ffn_norm"), dim_, c.norm_eps),
      attention_(params, prefix(layer, "attention"), c.attention, scratch, tp.plan().size(),
                 tp.plan().rank(), &cp),
      feed_forward_(params, prefix(layer, "feed_forward"), dim_, c.hidden, scratch,
                    tp.plan().size(), tp.plan().rank()) {}

void TransformerBlock::forward(float* x, std::int64_t batch, std::int64_t seq) {
  const std::int64_t local = tp_.local_rows(batch * seq);
  std::memcpy(ensure(input_, {local, dim_}), x,
              static_cast<std::size_t>(local * dim_) * sizeof(float));
  run_forward(x, batch, seq);
  if (checkpointing_) release();
}

// x += attention(attention_norm(x)), x += ffn(ffn_norm(x)). In one process each output is
// added inside its last product; under tensor parallelism each region sees the whole rows
// (gathered when sequence-parallel) and its partial output is summed across the group. In
// mixed precision the norms write bfloat16, which the products read (and the gathers move).
void TransformerBlock::run_forward(float* x, std::int64_t batch, std::int64_t seq) {
  const std::int64_t rows = batch * seq, local = tp_.local_rows(rows);
  norm_forward(attention_norm_, x, h1_, ensure(rstd1_, {local}), local);
  visit_operand(h1_, [&](auto* h1) {
    if (tp_.enabled()) {
      float* part = tp_.partial(rows, dim_);
      attention_.forward(tp_.gather(h1, rows, dim_, 0), part, batch, seq, /*accumulate=*/false);
      tp_.reduce(part, rows, dim_, x, /*accumulate=*/true);
    } else {
      attention_.forward(h1, x, batch, seq, /*accumulate=*/true);
    }
  });
  std::memcpy(ensure(x2_, {local, dim_}), x,
              static_cast<std::size_t>(local * dim_) * sizeof(float));
  norm_forward(ffn_norm_, x, h2_, ensure(rstd2_, {local}), local);
  visit_operand(h2_, [&](auto* h2) {
    if (tp_.enabled()) {
      float* part = tp_.partial(rows, dim_);
      feed_forward_.forward(tp_.gather(h2, rows, dim_, 0), part, rows, /*accumulate=*/false);
      tp_.reduce(part, rows, dim_, x, /*accumulate=*/true);
    } else {
      feed_forward_.forward(h2, x, rows, /*accumulate=*/true);
    }
  });
}

void TransformerBlock::norm_forward(const RMSNorm& norm, const float* x, Tensor& out, float* rstd,
                                    std::int64_t rows) {
  ensure_operand(out, {rows, dim_});
  if (out.dtype() == DType::kBFloat16) {
    norm.forward(x, out.data<BFloat16>(), rstd, rows);
  } else {
    norm.forward(x, out.data<float>(), rstd, rows);
  }
}

void TransformerBlock::forward_cached(float* x, std::int64_t n, std::int64_t position,
                                      LayerCache& cache) {
  float* h = ensure(h1_, {n, dim_});
  attention_norm_.forward(x, h, ensure(rstd1_, {n}), n);
  attention_.forward_cached(h, x, n, position, cache);
  ffn_norm_.forward(x, h, ensure(rstd2_, {n}), n);
  feed_forward_.forward(h, x, n, /*accumulate=*/true);
}

void TransformerBlock::backward(float* dx, std::int64_t batch, std::int64_t seq,
                                DeferredWeightGrads* deferred) {
  const std::int64_t rows = batch * seq, local = tp_.local_rows(rows);
  if (checkpointing_) {
    float* x = ensure(recompute_, {local, dim_});
    std::memcpy(x, input_.data<float>(), static_cast<std::size_t>(local * dim_) * sizeof(float));
    run_forward(x, batch, seq);
  }
  float* dh = ensure(scratch_.residual_grad, {local, dim_});
  // Sequence-parallel norms see this rank's rows only: their weight gradients are partial
  // sums, collected here and summed across the group at the end (the layout-invariant mode
  // gathers each leaf's instead).
  const bool partial_norms = tp_.plan().sequence_sharded() && !ffn_norm_.sums_leaves();
  float* dnorm = partial_norms ? ensure(norm_grads_, {2, dim_}) : nullptr;
  if (partial_norms) std::memset(dnorm, 0, static_cast<std::size_t>(2 * dim_) * sizeof(float));
  // dx is the gradient of x3 = x2 + ffn(h2): it flows to x2 directly and through ffn_norm.
  // Under tensor parallelism the region's input gradient is this rank's share: summed across
  // the group (reduce-scattered to this rank's rows when sequence-parallel).
  if (tp_.enabled()) {
    FeedForwardRegion region{feed_forward_};
    region_backward(tp_, region, dx, h2_, dh, batch, seq, dim_, deferred);
  } else {
    visit_operand(h2_, [&](auto* h2) { feed_forward_.backward(dx, h2, dh, rows, deferred); });
  }
  norm_backward(tp_, ffn_norm_, dh, x2_.data<float>(), rstd2_.data<float>(), dx, local,
                partial_norms ? dnorm + dim_ : nullptr);
  if (tp_.enabled()) {
    region_backward(tp_, attention_, dx, h1_, dh, batch, seq, dim_, deferred);
  } else {
    visit_operand(h1_, [&](auto* h1) { attention_.backward(dx, h1, dh, batch, seq, deferred); });
  }
  norm_backward(tp_, attention_norm_, dh, input_.data<float>(), rstd1_.data<float>(), dx, local,
                dnorm);
  if (partial_norms) {
    tp_.all_reduce(dnorm, 2 * dim_);
    float* g1 = attention_norm_.weight().grad.data<float>();
    float* g2 = ffn_norm_.weight().grad.data<float>();
    for (std::int64_t j = 0; j < dim_; ++j) {
      g1[j] += dnorm[j];
      g2[j] += dnorm[dim_ + j];
    }
  }
  if (checkpointing_) {
    if (deferred == nullptr) release();  // else the deferred gradients read the recomputation
    recompute_ = Tensor();
  }
}

void TransformerBlock::append_saved(std::vector<Tensor*>& saved) {
  saved.insert(saved.end(), {&input_, &h1_, &rstd1_, &x2_, &h2_, &rstd2_});
  attention_.append_saved(saved);
  feed_forward_.append_saved(saved);
}

void TransformerBlock::release() {
  h1_ = rstd1_ = x2_ = h2_ = rstd2_ = Tensor();
  attention_.release();
  feed_forward_.release();
}

}  // namespace weft::nn
