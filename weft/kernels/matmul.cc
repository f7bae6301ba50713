#include "weft/kernels/matmul.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "weft/base/error.h"
#include "weft/kernels/convert.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {
namespace {

using dnnl::memory;

// ---- float64: OpenBLAS -------------------------------------------------------------------

// OpenBLAS starts with one thread per core; the float64 products (tests, finite differences)
// run on the calling thread like every other product.
std::once_flag g_blas_threads;

std::atomic<std::int64_t> g_product_rows{512};

CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

// ---- float32 and bfloat16: oneDNN --------------------------------------------------------

// Never destroyed: the kernels' pool threads keep primitives and streams of it in their
// thread_local caches, destroyed at their exit, after the statics of this file would be.
const dnnl::engine& cpu_engine() {
  static const auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// Debian's oneDNN runs on OpenMP: a product would start a team of one thread per core on
// every calling thread, and weft's threads, each running its own block, would then fight over
// the cores. nthreads is an OpenMP setting of each thread, so every thread that runs a product
// sets its own to one (before its first primitive is made: oneDNN sizes its blocking by it).
void run_products_on_this_thread() {
  thread_local const bool once = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)once;
}

struct ProductKey {
  bool trans_a, trans_b, bf16;
  std::int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  // B read in the layout oneDNN picks for this product (packed by pack_weight), not as stored.
  bool packed_b = false;
  bool bf16_c = false;  // C written as bfloat16 (rounded to nearest even), not float32
  auto operator<=>(const ProductKey&) const = default;
};

struct Product {
  dnnl::matmul matmul;
  memory a, b, c, scratch;
};

// A (rows, cols) matrix read from a row-major array of row stride ld, or from the transpose
// of one (an array of cols rows), without a copy: oneDNN takes the strides.
memory::desc matrix(std::int64_t rows, std::int64_t cols, std::int64_t ld, bool transposed,
                    memory::data_type type) {
  return memory::desc({rows, cols}, type, transposed ? memory::dims{1, ld} : memory::dims{ld, 1});
}

std::string describe(const ProductKey& key) {
  return std::to_string(key.m) + " x " + std::to_string(key.n) + " x " + std::to_string(key.k) +
         (key.bf16 ? " bfloat16" : " float32") + " product (A" + (key.trans_a ? "^T" : "") +
         " row stride " + std::to_string(key.lda) + ", B" + (key.trans_b ? "^T" : "") +
         " row stride " + std::to_string(key.ldb) + ", C row stride " + std::to_string(key.ldc) +
         ", alpha " + std::to_string(key.alpha) + ", beta " + std::to_string(key.beta) + ")";
}

// What a oneDNN failure says: the product, and how to see what oneDNN tried.
Error onednn_error(const char* what, const ProductKey& key, const dnnl::error& e) {
  return Error(std::string("oneDNN ") + what + " the " + describe(key) + ": " + e.what() +
               ". Run again with ONEDNN_VERBOSE=1 to see the implementation it chose; "
               "ONEDNN_MAX_CPU_ISA=AVX2 rules out the newer instruction sets.");
}

Product make_product(const ProductKey& key) {
  const auto type = key.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const memory::desc a = matrix(key.m, key.k, key.lda, key.trans_a, type);
  const memory::desc b = key.packed_b ? memory::desc({key.k, key.n}, type, memory::format_tag::any)
                                      : matrix(key.k, key.n, key.ldb, key.trans_b, type);
  const memory::desc c = matrix(key.m, key.n, key.ldc, false,
                                key.bf16_c ? memory::data_type::bf16 : memory::data_type::f32);
  dnnl::primitive_attr attr;
  // oneDNN would otherwise allocate the products' scratch space call by call (and the kernel
  // zero fresh pages for it); each thread lends its own buffer instead (scratch below).
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.alpha != 1) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
    return {dnnl::matmul(pd), memory(a, cpu_engine(), DNNL_MEMORY_NONE),
            memory(pd.weights_desc(), cpu_engine(), DNNL_MEMORY_NONE),
            memory(c, cpu_engine(), DNNL_MEMORY_NONE),
            memory(pd.scratchpad_desc(), cpu_engine(), DNNL_MEMORY_NONE)};
  } catch (const dnnl::error& e) {
    throw onednn_error("cannot make", key, e);
  }
}

// Each thread's primitives by shape. A training step uses a dozen shapes; the cap only bounds
// programs that sweep through many (benchmarks, tests), which then make some twice.
constexpr std::size_t kMaxProducts = 256;

Product& product(const ProductKey& key) {
  thread_local std::map<ProductKey, Product> products;
  auto it = products.find(key);
  if (it != products.end()) return it->second;
  if (products.size() >= kMaxProducts) products.clear();
  return products.emplace(key, make_product(key)).first->second;
}

// A 64-byte aligned buffer that grows to the largest size asked for and never shrinks.
class GrowingBuffer {
 public:
  void* at_least(std::size_t bytes) {
    if (bytes > size_) {
      data_.reset(new (std::align_val_t{64}) std::byte[bytes]);
      size_ = bytes;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte[], Free> data_;
  std::size_t size_ = 0;
};

// The calling thread's scratch space for its products.
void* scratch(std::size_t bytes) {
  thread_local GrowingBuffer buffer;
  return buffer.at_least(bytes);
}

dnnl::stream& this_thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

void onednn_gemm(const ProductKey& key, const void* a, const void* b, void* out) {
  if (key.m == 0 || key.n == 0) return;
  if (key.k == 0) {  // no terms: C = beta * C, which oneDNN does not run (float32 C only)
    auto* c = static_cast<float*>(out);
    for (std::int64_t i = 0; i < key.m; ++i)
      for (std::int64_t j = 0; j < key.n; ++j)
        c[i * key.ldc + j] = key.beta == 0 ? 0 : key.beta * c[i * key.ldc + j];
    return;
  }
  run_products_on_this_thread();
  try {
    dnnl::stream& stream = this_thread_stream();
    Product& p = product(key);
    p.a.set_data_handle(const_cast<void*>(a));
    p.b.set_data_handle(const_cast<void*>(b));
    p.c.set_data_handle(out);
    p.scratch.set_data_handle(scratch(p.scratch.get_desc().get_size()));
    p.matmul.execute(stream, {{DNNL_ARG_SRC, p.a},
                              {DNNL_ARG_WEIGHTS, p.b},
                              {DNNL_ARG_DST, p.c},
                              {DNNL_ARG_SCRATCHPAD, p.scratch}});
    stream.wait();
  } catch (const dnnl::error& e) {
    throw onednn_error("failed to run", key, e);
  }
}

// A float32 weight rounded to bfloat16 in the layout a product reads its B in: one oneDNN
// reorder from the weight as stored (B or B^T, row stride ldb), kept per product key.
struct Packing {
  dnnl::reorder reorder;
  memory from, to;
};

Packing make_packing(const ProductKey& key, const memory::desc& packed) {
  const memory::desc from = matrix(key.k, key.n, key.ldb, key.trans_b, memory::data_type::f32);
  try {
    const dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), packed);
    return {dnnl::reorder(pd), memory(from, cpu_engine(), DNNL_MEMORY_NONE),
            memory(packed, cpu_engine(), DNNL_MEMORY_NONE)};
  } catch (const dnnl::error& e) {
    throw onednn_error("cannot pack the weight of", key, e);
  }
}

// w (float32) packed for the product `key` into the calling thread's buffer `slot` (0 or 1:
// a call's two block heights), which holds it until the thread packs into that slot again.
const void* pack_weight(const ProductKey& key, const float* w, int slot) {
  run_products_on_this_thread();
  thread_local std::map<ProductKey, Packing> packings;
  thread_local GrowingBuffer buffers[2];
  const memory::desc packed = product(key).b.get_desc();
  auto it = packings.find(key);
  if (it == packings.end()) {
    if (packings.size() >= kMaxProducts) packings.clear();
    it = packings.emplace(key, make_packing(key, packed)).first;
  }
  Packing& p = it->second;
  p.from.set_data_handle(const_cast<float*>(w));
  p.to.set_data_handle(buffers[slot].at_least(packed.get_size()));
  try {
    p.reorder.execute(this_thread_stream(), p.from, p.to);
    this_thread_stream().wait();
  } catch (const dnnl::error& e) {
    throw onednn_error("failed to pack the weight of", key, e);
  }
  return p.to.get_data_handle();
}

bool isa_has(dnnl::cpu_isa isa, dnnl::cpu_isa feature) {
  return (static_cast<unsigned>(isa) & static_cast<unsigned>(feature)) ==
         static_cast<unsigned>(feature);
}

// A bf16 operand of `rows` stored rows of `cols`, row stride ld, widened into a dense float
// array of this thread's (row stride cols).
const float* widened(const BFloat16* x, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                     std::vector<float>& into) {
  into.resize(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) to_float(x + r * ld, into.data() + r * cols, cols);
  return into.data();
}

// The fixed blocks the products are cut into, whatever the thread count (below): rows (tokens)
// of y and dx per product (set_product_rows), and
// rows (output features) of dW per product: the tallest of 512, 256 and 128 that still cuts
// the weight into 4 or more blocks, for two to four threads to share. oneDNN repacks x for
// every block (its bf16 dW kernel, gemm:jit: 362, 381 and 400 GFLOP/s at 128, 256 and 512 rows
// on Zen 5). A function of the shape alone, never of the thread count.
std::int64_t feature_block(std::int64_t out) {
  for (const std::int64_t block : {512, 256})
    if (out >= 3 * block + 1) return block;
  return 128;
}

// fn(first, end) for the blocks [b * block, (b + 1) * block) of [0, n), the last one shorter,
// shared among the threads a whole block at a time.
void for_fixed_blocks(std::int64_t n, std::int64_t block,
                      const std::function<void(std::int64_t, std::int64_t)>& fn) {
  const std::int64_t blocks = (n + block - 1) / block;
  parallel_for(blocks, 1, [&](std::int64_t first_block, std::int64_t end_block) {
    for (std::int64_t b = first_block; b < end_block; ++b)
      fn(b * block, std::min(n, (b + 1) * block));
  });
}

}  // namespace

template <>
void gemm<double>(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  double alpha, const double* a, std::int64_t lda, const double* b,
                  std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  std::call_once(g_blas_threads, [] { openblas_set_num_threads(1); });
  cblas_dgemm(CblasRowMajor, op(trans_a), op(trans_b), static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda),
              b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

template <>
void gemm<float>(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                 float beta, float* c, std::int64_t ldc) {
  onednn_gemm({trans_a, trans_b, false, m, n, k, lda, ldb, ldc, alpha, beta}, a, b, c);
}

template <>
void gemm<BFloat16>(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                    float alpha, const BFloat16* a, std::int64_t lda, const BFloat16* b,
                    std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (bf16_native()) {
    onednn_gemm({trans_a, trans_b, true, m, n, k, lda, ldb, ldc, alpha, beta}, a, b, c);
    return;
  }
  // Without bf16 instructions oneDNN's own bf16 products are emulated at a fraction of its
  // float32 speed (AVX-512 without BF16: 21-33 GFLOP/s against 70-100): widen, then float32.
  thread_local std::vector<float> a32, b32;
  const float* wa = trans_a ? widened(a, k, m, lda, a32) : widened(a, m, k, lda, a32);
  const float* wb = trans_b ? widened(b, n, k, ldb, b32) : widened(b, k, n, ldb, b32);
  gemm<float>(trans_a, trans_b, m, n, k, alpha, wa, trans_a ? m : k, wb, trans_b ? k : n, beta, c,
              ldc);
}

bool bf16_native() {
  static const bool native =
      isa_has(dnnl::get_effective_cpu_isa(), dnnl::cpu_isa::avx512_core_bf16);
  return native;
}

std::string matmul_isa(DType dtype) {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  using dnnl::cpu_isa;
  std::string name = isa_has(isa, cpu_isa::avx512_core_amx)    ? "avx512_core_amx"
                     : isa_has(isa, cpu_isa::avx512_core_bf16) ? "avx512_core_bf16"
                     : isa_has(isa, cpu_isa::avx512_core_vnni) ? "avx512_core_vnni"
                     : isa_has(isa, cpu_isa::avx512_core)      ? "avx512_core"
                     : isa_has(isa, cpu_isa::avx2_vnni)        ? "avx2_vnni"
                     : isa_has(isa, cpu_isa::avx2)             ? "avx2"
                     : isa_has(isa, cpu_isa::avx)              ? "avx"
                                                               : "sse41";
  if (dtype == DType::kBFloat16 && !bf16_native()) name += " (bf16 emulated)";
  return name;
}

// With several threads each runs single-threaded products on its share: for the tall, narrow
// products of training splitting rows measured as fast as the library's own threading or
// faster (docs/TRAINING.md). y and dx split the rows (tokens); dW splits its own rows (output
// features), each block summing over every token, so no partial sums are needed. The blocks are
// fixed, one product each, so that one thread makes the same calls as many: a library's result
// for a row may depend on the shape of the call it is in (its blocking of k follows m and n),
// and results must not depend on the thread count (docs/TRAINING.md).
void set_product_rows(std::int64_t rows) {
  if (rows < 1) throw InvalidArgument("products of " + std::to_string(rows) + " rows");
  g_product_rows.store(rows);
}
std::int64_t product_rows() { return g_product_rows.load(); }

namespace {

// out[rows, n] (+)= a[rows, k] op(w) in product_rows() row blocks: y's and dx's products.
template <class T>
void rows_times(bool trans_w, const T* a, std::int64_t lda, const T* w, std::int64_t ldw,
                Accum<T>* out, std::int64_t ldo, std::int64_t rows, std::int64_t n, std::int64_t k,
                bool accumulate) {
  for_fixed_blocks(rows, product_rows(), [&](std::int64_t first, std::int64_t end) {
    gemm<T>(false, trans_w, end - first, n, k, 1, a + first * lda, lda, w, ldw, accumulate ? 1 : 0,
            out + first * ldo, ldo);
  });
}

}  // namespace

template <class T>
void product_xwt(const T* x, std::int64_t ldx, const T* w, std::int64_t ldw, Accum<T>* y,
                 std::int64_t ldy, std::int64_t rows, std::int64_t n, std::int64_t k,
                 bool accumulate) {
  rows_times(true, x, ldx, w, ldw, y, ldy, rows, n, k, accumulate);
}

template <class T>
void product_xw(const T* dy, std::int64_t lddy, const T* w, std::int64_t ldw, Accum<T>* dx,
                std::int64_t lddx, std::int64_t rows, std::int64_t n, std::int64_t k,
                bool accumulate) {
  rows_times(false, dy, lddy, w, ldw, dx, lddx, rows, n, k, accumulate);
}

template <class T>
void product_ytx(const T* dy, std::int64_t lddy, const T* x, std::int64_t ldx, Accum<T>* dw,
                 std::int64_t lddw, std::int64_t rows, std::int64_t m, std::int64_t n,
                 bool accumulate) {
  for_fixed_blocks(m, feature_block(m), [&](std::int64_t first, std::int64_t end) {
    gemm<T>(true, false, end - first, n, rows, 1, dy + first, lddy, x, ldx, accumulate ? 1 : 0,
            dw + first * lddw, lddw);
  });
}

template <class T>
void linear_forward(const T* x, const T* w, Accum<T>* y, std::int64_t rows, std::int64_t in,
                    std::int64_t out, bool accumulate) {
  product_xwt(x, in, w, in, y, out, rows, out, in, accumulate);
}

template <class T>
void linear_backward(const T* dy, const T* x, const T* w, Accum<T>* dx, Accum<T>* dw,
                     std::int64_t rows, std::int64_t in, std::int64_t out, bool accumulate_dx,
                     bool accumulate_dw) {
  if (dx != nullptr) product_xw(dy, out, w, in, dx, in, rows, in, out, accumulate_dx);
  if (dw != nullptr) product_ytx(dy, out, x, in, dw, in, rows, out, in, accumulate_dw);
}

namespace {

// C[rows, n] = A[rows, k] op(W), or C += that with beta 1 (C float32), op(W) a float32 weight
// (W^T with trans_w) rounded to bfloat16: packed once for the call, in oneDNN's layout for the
// blocks' products, and read by all of them. The blocks are linear_forward's (product_rows() rows).
// C is float32, or bfloat16 rounded from the float32 sums.
template <class C>
void rows_times_weight(const BFloat16* a, const float* w, bool trans_w, C* c, std::int64_t rows,
                       std::int64_t n, std::int64_t k, float beta) {
  constexpr bool bf16_c = std::is_same_v<C, BFloat16>;
  if (rows == 0 || n == 0) return;
  const std::int64_t row_block = product_rows();
  if (!bf16_native() || k == 0) {  // emulated products widen again: no packing to do
    thread_local std::vector<BFloat16> w16;
    w16.resize(static_cast<std::size_t>(n * k));
    to_bfloat16_threaded(w, w16.data(), n * k);
    for_fixed_blocks(rows, row_block, [&](std::int64_t first, std::int64_t end) {
      const auto product = [&](float* into) {
        gemm<BFloat16>(false, trans_w, end - first, n, k, 1, a + first * k, k, w16.data(),
                       trans_w ? k : n, beta, into, n);
      };
      if constexpr (bf16_c) {  // the float32 sums, then rounded
        thread_local std::vector<float> sums;
        sums.resize(static_cast<std::size_t>((end - first) * n));
        product(sums.data());
        to_bfloat16(sums.data(), c + first * n, (end - first) * n);
      } else {
        product(c + first * n);
      }
    });
    return;
  }
  auto key = [&](std::int64_t m) {
    ProductKey product{false, trans_w, true, m, n, k, k, trans_w ? k : n, n, 1, beta, true};
    product.bf16_c = bf16_c;
    return product;
  };
  const std::int64_t full = std::min(rows, row_block), tail = rows % row_block;
  const void* packed_full = pack_weight(key(full), w, 0);
  const void* packed_tail = packed_full;
  if (rows > row_block && tail != 0 &&
      product(key(tail)).b.get_desc() != product(key(full)).b.get_desc()) {
    packed_tail = pack_weight(key(tail), w, 1);
  }
  for_fixed_blocks(rows, row_block, [&](std::int64_t first, std::int64_t end) {
    const std::int64_t m = end - first;
    onednn_gemm(key(m), a + first * k, m == full ? packed_full : packed_tail, c + first * n);
  });
}

}  // namespace

void linear_forward(const BFloat16* x, const float* w, float* y, std::int64_t rows, std::int64_t in,
                    std::int64_t out, bool accumulate) {
  rows_times_weight(x, w, /*trans_w=*/true, y, rows, out, in, accumulate ? 1 : 0);
}

void linear_forward(const BFloat16* x, const float* w, BFloat16* y, std::int64_t rows,
                    std::int64_t in, std::int64_t out) {
  rows_times_weight(x, w, /*trans_w=*/true, y, rows, out, in, 0);
}

void linear_backward_input(const BFloat16* dy, const float* w, float* dx, std::int64_t rows,
                           std::int64_t in, std::int64_t out, bool accumulate_dx) {
  rows_times_weight(dy, w, /*trans_w=*/false, dx, rows, in, out, accumulate_dx ? 1 : 0);
}

#define WEFT_LINEAR(T)                                                                        \
  template void product_xwt<T>(const T*, std::int64_t, const T*, std::int64_t, Accum<T>*,     \
                               std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool); \
  template void product_xw<T>(const T*, std::int64_t, const T*, std::int64_t, Accum<T>*,      \
                              std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool);  \
  template void product_ytx<T>(const T*, std::int64_t, const T*, std::int64_t, Accum<T>*,     \
                               std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool); \
  template void linear_forward<T>(const T*, const T*, Accum<T>*, std::int64_t, std::int64_t,  \
                                  std::int64_t, bool);                                        \
  template void linear_backward<T>(const T*, const T*, const T*, Accum<T>*, Accum<T>*,        \
                                   std::int64_t, std::int64_t, std::int64_t, bool, bool);
WEFT_LINEAR(float)
WEFT_LINEAR(double)
WEFT_LINEAR(BFloat16)
#undef WEFT_LINEAR

}  // namespace weft::kernels
