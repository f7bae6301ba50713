// Staging: the torch tensors of one c10d call as the contiguous weft buffers its operation
// runs on, and the copies that take results back to the caller's tensors when it completes.
//
// A contiguous CPU tensor is used in place. A non-contiguous one (a transpose, a slice with a
// step) is staged through a contiguous copy, as are lists of tensors, which c10d passes where
// weft takes one buffer (all_gather's outputs, scatter's inputs, ...). Every check that the
// call is well formed on this rank happens here, before anything is communicated, and throws
// weft::InvalidArgument naming the call: CPU tensors, strided layout, a dtype weft carries,
// equal dtypes and sizes where the operation needs them.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "weft/dist/buffer.h"
#include "weft/dist/reduce_op.h"

namespace weft::torch_backend {

// Staging buffers kept between calls, per group. A fresh multi-megabyte buffer per call costs
// a page fault per 4 KiB page when first written, and unmapping it when freed: on the VM
// measured, that made a 4 MiB all_gather into a list of tensors 18 times slower than weft's
// own (12 ms against 0.66 ms). Thread-safe.
class BufferPool {
 public:
  // `bytes` bytes, contiguous, from a kept buffer of at least that size (at most twice).
  at::Tensor take(std::int64_t bytes);
  // Keeps `buffer` (a byte tensor from take) for later calls; at most kKept are kept.
  void give(at::Tensor buffer);

 private:
  static constexpr std::size_t kKept = 4;
  std::mutex mu_;
  std::vector<at::Tensor> free_;
};

class Staging {
 public:
  Staging(std::string call, std::shared_ptr<BufferPool> pool)
      : call_(std::move(call)), pool_(std::move(pool)) {}
  Staging(Staging&&) = default;
  Staging& operator=(Staging&&) = delete;
  // Gives the staging buffers back to the pool.
  ~Staging();

  // The one tensor a c10d call passes in a list (the multi-device form is not supported).
  const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* what) const;

  // `t` read by the operation.
  dist::Buffer input(const at::Tensor& t);
  // `t` written by the operation (and read, for broadcast, all_reduce and reduce).
  dist::Buffer output(const at::Tensor& t);
  // The tensors of `ts`, concatenated in order, read by the operation. Each has `like`'s
  // dtype, and its number of elements too when `same_size`.
  dist::Buffer inputs(const std::vector<at::Tensor>& ts, const at::Tensor& like, bool same_size);
  // The tensors of `ts`, concatenated in order, written by the operation.
  dist::Buffer outputs(const std::vector<at::Tensor>& ts, const at::Tensor& like, bool same_size);
  // The tensors of `ts`, each written by the operation in place (as output() does), of
  // `like`'s dtype and number of elements: no staging buffer where they are contiguous.
  std::vector<dist::Buffer> outputs_each(const std::vector<at::Tensor>& ts, const at::Tensor& like);

  // The tensors of `ts` (of `like`'s dtype), concatenated in order, read and written.
  dist::Buffer inouts(const std::vector<at::Tensor>& ts, const at::Tensor& like);

  // Checks that `op` applies to `t`'s dtype (sums of bools are not bools).
  void check_reduce(const at::Tensor& t, dist::ReduceOp op) const;

  // Copies the staged results back into the caller's tensors; call once the operation
  // succeeded (never after a failure: the caller's tensors keep their old contents).
  void finish();

 private:
  dist::Buffer buffer_of(const at::Tensor& contiguous);
  void check(const at::Tensor& t) const;
  void check_like(const std::vector<at::Tensor>& ts, const at::Tensor& like, bool same_size) const;
  [[noreturn]] void fail(const std::string& what) const;

  // The tensors of `ts` copied one after the other into a staged tensor.
  at::Tensor concatenated(const std::vector<at::Tensor>& ts, const at::Tensor& like,
                          bool same_size);
  // Copies flat's consecutive slices back into the tensors of `ts` on finish().
  void copy_back_slices(const std::vector<at::Tensor>& ts, const at::Tensor& flat);
  // A contiguous 1-D tensor of `numel` elements like `like`'s, from the pool.
  at::Tensor staged(std::int64_t numel, const at::Tensor& like);

  std::string call_;
  std::shared_ptr<BufferPool> pool_;
  std::vector<at::Tensor> pooled_;  // the byte buffers taken from pool_
  std::vector<at::Tensor> held_;    // what the operation reads or writes: alive until it ends
  // (caller's tensor, staged copy) pairs to copy back; a list output is one staged tensor
  // copied back in slices.
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back_;
};

// torch's reduce op as weft's; throws weft::InvalidArgument for PREMUL_SUM (a NCCL op).
dist::ReduceOp reduce_op_of(int torch_op, const std::string& call);

}  // namespace weft::torch_backend
