// Matrix products, all row-major, and the Linear layer's forward and backward written with
// them. float32 and bfloat16 run on oneDNN; float64 (the finite-difference checks) on OpenBLAS,
// since oneDNN has no float64 product on CPUs.
//
// T is the type of the operands A and B: float, BFloat16 or double. The product accumulates and
// is written in Accum<T>: float32 for float and bfloat16 operands (bf16 inputs, fp32
// accumulation and output: mixed precision), double for double.
//
// bfloat16 products run on the CPU's bf16 instructions (AVX512_BF16, AMX) when it has them;
// on other CPUs the operands are converted to float32 first and the float32 product runs
// (bf16_native() says which). Every product runs on the calling thread alone: weft's threads
// split the work into fixed blocks (linear_*) and each block is one single-threaded oneDNN call,
// so that results do not depend on the thread count.
//
// Thread-safety: any thread may call any function here at any time. Each thread keeps, until
// it exits, its own oneDNN primitives (made once per shape on the thread's first product of
// that shape, at most 256), its own scratch space for them and, where bf16 is emulated, its
// float32 copies of the operands (each the largest it needed).
// Side effect: a thread's first float32 or bfloat16 product sets its OpenMP thread count to
// one (omp_set_num_threads; Debian's oneDNN runs on OpenMP), for good: a program that also
// runs OpenMP code of its own on that thread (PyTorch in the same process) gets one thread
// there, until it sets its own count again.
// k == 0 gives C = beta * C (a and b not read); m or n == 0 does nothing. Row strides are at
// least the rows' widths.
// Errors: a product oneDNN cannot make or run throws weft::Error naming the shape, the
// strides and what to try.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "weft/base/dtype.h"

namespace weft::kernels {

template <class T>
using Accum = std::conditional_t<std::is_same_v<T, double>, double, float>;

// C[m, n] = alpha * op(A) op(B) + beta * C; op(A) is A[m, k] or, with trans_a, A[k, m] read
// transposed (likewise B). ld* are the row strides. With beta 0, C is not read.
template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          Accum<T> alpha, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, Accum<T> beta,
          Accum<T>* c, std::int64_t ldc);

// y (N, out) = x (N, in) W (out, in)^T, or y += that product when accumulate: a residual add
// inside the product, with no pass of its own.
template <class T>
void linear_forward(const T* x, const T* w, Accum<T>* y, std::int64_t rows, std::int64_t in,
                    std::int64_t out, bool accumulate = false);
// dx (N, in) = dy W (added to dx when accumulate_dx, else overwritten; skipped when dx is
// null), dW (out, in) += dy^T x (overwritten when !accumulate_dw; skipped when dw is null):
// either half alone, so that callers can move data between them (tensor parallelism reduces
// dx while dW computes).
template <class T>
void linear_backward(const T* dy, const T* x, const T* w, Accum<T>* dx, Accum<T>* dw,
                     std::int64_t rows, std::int64_t in, std::int64_t out,
                     bool accumulate_dx = false, bool accumulate_dw = true);

// The products linear_forward and linear_backward are made of, on operands with row strides
// (ld*, at least the rows' widths), in the same fixed blocks: y's and dx's rows by
// product_rows(), dW's rows by a block that depends on their count alone. Layout-invariant
// tensor parallelism (nn/layers.h) runs each fixed block of features as one such call.
// y[rows, n] = x[rows, k] w[n, k]^T, or y += that when accumulate.
template <class T>
void product_xwt(const T* x, std::int64_t ldx, const T* w, std::int64_t ldw, Accum<T>* y,
                 std::int64_t ldy, std::int64_t rows, std::int64_t n, std::int64_t k,
                 bool accumulate);
// dx[rows, n] (+)= dy[rows, k] w[k, n].
template <class T>
void product_xw(const T* dy, std::int64_t lddy, const T* w, std::int64_t ldw, Accum<T>* dx,
                std::int64_t lddx, std::int64_t rows, std::int64_t n, std::int64_t k,
                bool accumulate);
// dw[m, n] (+)= dy[rows, m]^T x[rows, n].
template <class T>
void product_ytx(const T* dy, std::int64_t lddy, const T* x, std::int64_t ldx, Accum<T>* dw,
                 std::int64_t lddw, std::int64_t rows, std::int64_t m, std::int64_t n,
                 bool accumulate);

// Mixed precision with the float32 weight: the same products as linear_forward<BFloat16> and
// linear_backward<BFloat16>'s dx half on W rounded to bfloat16, W rounded once per call
// straight into the layout oneDNN's products read (no row-major bf16 copy, no packing per
// block). Thread-safety as above; each calling thread keeps the packed weight of its last
// call, the largest it needed.
void linear_forward(const BFloat16* x, const float* w, float* y, std::int64_t rows, std::int64_t in,
                    std::int64_t out, bool accumulate = false);
// The same product written as bfloat16, each element the float32 sum rounded to nearest even,
// for an output that only bf16 readers take (SwiGLU's input): half the bytes.
void linear_forward(const BFloat16* x, const float* w, BFloat16* y, std::int64_t rows,
                    std::int64_t in, std::int64_t out);
void linear_backward_input(const BFloat16* dy, const float* w, float* dx, std::int64_t rows,
                           std::int64_t in, std::int64_t out, bool accumulate_dx = false);

// The rows (tokens) of y and dx each product of linear_forward and linear_backward computes:
// 512, whatever the thread count. Process-wide, set before a model runs: layout-invariant
// training (nn/leaf_sums.h) sets one sequence's rows (at most 512, dividing them), so that
// every rank's products cut its rows as one process cuts them all (a library's result for a
// row may depend on the shape of the product it is in).
void set_product_rows(std::int64_t rows);
std::int64_t product_rows();

// Whether bfloat16 products run on bf16 instructions (false: converted to float32 first).
bool bf16_native();
// The instruction set oneDNN runs the products of `dtype` (kFloat32 or kBFloat16) on, by
// oneDNN's name: "avx512_core_amx", "avx512_core_bf16", "avx512_core", "avx2", ...; a bf16
// product that is converted says "avx2 (bf16 emulated)" and the like. ONEDNN_MAX_CPU_ISA in the
// environment caps it (oneDNN reads it on the first product).
std::string matmul_isa(DType dtype);

}  // namespace weft::kernels
