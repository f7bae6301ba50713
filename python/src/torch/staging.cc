#include "python/src/torch/staging.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "weft/base/error.h"

namespace weft::torch_backend {
namespace {

std::optional<DType> dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return DType::kFloat32;
    case at::kDouble:
      return DType::kFloat64;
    case at::kHalf:
      return DType::kFloat16;
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kChar:
      return DType::kInt8;
    case at::kByte:
      return DType::kUInt8;
    case at::kBool:
      return DType::kUInt8;  // 0 or 1 in a byte; reductions checked below
    case at::kInt:
      return DType::kInt32;
    case at::kLong:
      return DType::kInt64;
    default:
      return std::nullopt;
  }
}

std::int64_t total_numel(const std::vector<at::Tensor>& ts) {
  std::int64_t total = 0;
  for (const auto& t : ts) total += t.numel();
  return total;
}

std::string shape_of(const at::Tensor& t) {
  std::string s = "[";
  for (auto d : t.sizes()) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "]";
}

// dst = src (same dtype and number of elements). Contiguous pairs are a memcpy: at::Tensor::
// copy_ would split large copies over ATen's OpenMP threads, a team of them for every thread
// it is called on (weft's queue threads included), which on a machine with a core per rank
// made a 4 MiB all_gather 30 times slower than weft's own.
void copy_into(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.is_contiguous() && src.is_contiguous()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
  } else {
    dst.copy_(src.view(dst.sizes()));
  }
}

}  // namespace

at::Tensor BufferPool::take(std::int64_t bytes) {
  {
    const std::lock_guard lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->numel() >= bytes && it->numel() <= 2 * bytes) {
        at::Tensor kept = std::move(*it);
        free_.erase(it);
        return kept;
      }
    }
  }
  return at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
}

void BufferPool::give(at::Tensor buffer) {
  const std::lock_guard lock(mu_);
  if (free_.size() < kKept) {
    free_.push_back(std::move(buffer));
    return;
  }
  auto smallest = std::min_element(free_.begin(), free_.end(), [](const auto& a, const auto& b) {
    return a.numel() < b.numel();
  });
  if (smallest->numel() < buffer.numel()) *smallest = std::move(buffer);
}

Staging::~Staging() {
  held_.clear();  // the views of the pooled buffers go first
  copy_back_.clear();
  for (auto& buffer : pooled_) pool_->give(std::move(buffer));
}

at::Tensor Staging::staged(std::int64_t numel, const at::Tensor& like) {
  const std::int64_t bytes = numel * static_cast<std::int64_t>(like.element_size());
  pooled_.push_back(pool_->take(bytes));
  return pooled_.back().narrow(0, 0, bytes).view(like.scalar_type());
}

void Staging::fail(const std::string& what) const {
  throw InvalidArgument("weft (torch.distributed backend): " + call_ + ": " + what);
}

void Staging::check(const at::Tensor& t) const {
  if (!t.defined()) fail("a tensor is undefined");
  if (!t.device().is_cpu()) fail("tensors must be on the CPU, got one on " + t.device().str());
  if (t.layout() != at::kStrided) fail("sparse tensors are not supported");
  if (!dtype_of(t.scalar_type())) {
    fail(std::string("dtype ") + c10::toString(t.scalar_type()) +
         " is not supported (float32, float64, float16, bfloat16, int8, uint8, bool, int32, "
         "int64 are)");
  }
}

void Staging::check_like(const std::vector<at::Tensor>& ts, const at::Tensor& like,
                         bool same_size) const {
  for (const auto& t : ts) {
    check(t);
    if (t.scalar_type() != like.scalar_type()) {
      fail(std::string("tensors of dtypes ") + c10::toString(t.scalar_type()) + " and " +
           c10::toString(like.scalar_type()) + " in one call");
    }
    if (same_size && t.numel() != like.numel()) {
      fail("a tensor of shape " + shape_of(t) + " where " + std::to_string(like.numel()) +
           " elements (the shape " + shape_of(like) + ") are needed");
    }
  }
}

const at::Tensor& Staging::single(const std::vector<at::Tensor>& tensors, const char* what) const {
  if (tensors.size() != 1) {
    fail(std::string("takes one ") + what + " tensor per process, got " +
         std::to_string(tensors.size()));
  }
  check(tensors[0]);
  return tensors[0];
}

void Staging::check_reduce(const at::Tensor& t, dist::ReduceOp op) const {
  if (t.scalar_type() == at::kBool && (op == dist::ReduceOp::kSum || op == dist::ReduceOp::kAvg)) {
    fail("ReduceOp." + std::string(dist::reduce_op_name(op)) +
         " of bool tensors; use MAX (or), MIN (and) or PRODUCT");
  }
}

dist::Buffer Staging::buffer_of(const at::Tensor& contiguous) {
  held_.push_back(contiguous);
  return {contiguous.data_ptr(), static_cast<std::size_t>(contiguous.numel()),
          *dtype_of(contiguous.scalar_type())};
}

dist::Buffer Staging::input(const at::Tensor& t) {
  check(t);
  const c10::NoGradGuard no_grad;
  return buffer_of(t.is_contiguous() ? t : t.contiguous());
}

dist::Buffer Staging::output(const at::Tensor& t) {
  check(t);
  if (t.is_contiguous()) return buffer_of(t);
  const c10::NoGradGuard no_grad;
  const at::Tensor staged = t.contiguous();  // a copy: read too, for in-place operations
  copy_back_.emplace_back(t, staged);
  return buffer_of(staged);
}

at::Tensor Staging::concatenated(const std::vector<at::Tensor>& ts, const at::Tensor& like,
                                 bool same_size) {
  check_like(ts, like, same_size);
  const c10::NoGradGuard no_grad;
  const at::Tensor flat = staged(total_numel(ts), like);
  std::int64_t at = 0;
  for (const auto& t : ts) {
    copy_into(flat.narrow(0, at, t.numel()), t.reshape({-1}));
    at += t.numel();
  }
  return flat;
}

dist::Buffer Staging::inputs(const std::vector<at::Tensor>& ts, const at::Tensor& like,
                             bool same_size) {
  return buffer_of(concatenated(ts, like, same_size));
}

dist::Buffer Staging::outputs(const std::vector<at::Tensor>& ts, const at::Tensor& like,
                              bool same_size) {
  check_like(ts, like, same_size);
  const at::Tensor flat = staged(total_numel(ts), like);
  copy_back_slices(ts, flat);
  return buffer_of(flat);
}

std::vector<dist::Buffer> Staging::outputs_each(const std::vector<at::Tensor>& ts,
                                                const at::Tensor& like) {
  check_like(ts, like, /*same_size=*/true);
  std::vector<dist::Buffer> buffers;
  for (const auto& t : ts) buffers.push_back(output(t));
  return buffers;
}

dist::Buffer Staging::inouts(const std::vector<at::Tensor>& ts, const at::Tensor& like) {
  const at::Tensor flat = concatenated(ts, like, /*same_size=*/false);
  copy_back_slices(ts, flat);
  return buffer_of(flat);
}

void Staging::copy_back_slices(const std::vector<at::Tensor>& ts, const at::Tensor& flat) {
  std::int64_t at = 0;
  for (const auto& t : ts) {
    copy_back_.emplace_back(t, flat.narrow(0, at, t.numel()));
    at += t.numel();
  }
}

void Staging::finish() {
  const c10::NoGradGuard no_grad;
  for (auto& [user, staged] : copy_back_) copy_into(user, staged);
}

dist::ReduceOp reduce_op_of(int torch_op, const std::string& call) {
  using T = c10d::ReduceOp;
  switch (torch_op) {
    case T::SUM:
      return dist::ReduceOp::kSum;
    case T::AVG:
      return dist::ReduceOp::kAvg;
    case T::PRODUCT:
      return dist::ReduceOp::kProduct;
    case T::MIN:
      return dist::ReduceOp::kMin;
    case T::MAX:
      return dist::ReduceOp::kMax;
    case T::BAND:
      return dist::ReduceOp::kBAnd;
    case T::BOR:
      return dist::ReduceOp::kBOr;
    case T::BXOR:
      return dist::ReduceOp::kBXor;
    case T::PREMUL_SUM:
      throw InvalidArgument("weft (torch.distributed backend): " + call +
                            ": ReduceOp.PREMUL_SUM is NCCL's; weft does not support it");
    default:
      throw InvalidArgument("weft (torch.distributed backend): " + call + ": unknown ReduceOp " +
                            std::to_string(torch_op) + " (a newer torch than 1.13?)");
  }
}

}  // namespace weft::torch_backend
