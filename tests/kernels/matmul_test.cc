// The matrix products (oneDNN for float32 and bfloat16, OpenBLAS for float64) against plain
// loops in double, and the float32 <-> bfloat16 conversions against BFloat16(float) on every
// SIMD target. ctest also runs the Matmul suite with oneDNN held to AVX2 and to AVX-512
// without BF16 (ONEDNN_MAX_CPU_ISA), where bfloat16 products are emulated.
#include "weft/kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/support/random.h"
#include "tests/support/simd_targets.h"
#include "weft/kernels/convert.h"

namespace weft::kernels {
namespace {

using weft::testing::random_floats;

std::vector<BFloat16> to_bf16(const std::vector<float>& x) {
  std::vector<BFloat16> y;
  for (float v : x) y.emplace_back(v);
  return y;
}

double value(float x) { return x; }
double value(BFloat16 x) { return static_cast<float>(x); }

// C = alpha op(A) op(B) + beta C by loops in double, A and B stored with row strides lda, ldb.
template <class T>
std::vector<double> reference(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                              double alpha, const std::vector<T>& a, std::int64_t lda,
                              const std::vector<T>& b, std::int64_t ldb, double beta,
                              const std::vector<float>& c) {
  std::vector<double> want(c.size());
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < k; ++p)
        s += value(ta ? a[p * lda + i] : a[i * lda + p]) *
             value(tb ? b[j * ldb + p] : b[p * ldb + j]);
      want[i * n + j] = alpha * s + (beta == 0 ? 0 : beta * c[i * n + j]);
    }
  }
  return want;
}

// Every transposition, row strides wider than the rows, alpha and beta: against loops, to the
// rounding of float32 sums of k terms.
template <class T>
void expect_gemm_matches_loops() {
  const std::int64_t m = 37, n = 21, k = 70, pad = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 0.5f}) {
        const std::int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad;
        const auto a32 = random_floats(static_cast<std::size_t>((ta ? k : m) * lda), 1);
        const auto b32 = random_floats(static_cast<std::size_t>((tb ? n : k) * ldb), 2);
        std::vector<T> a(a32.begin(), a32.end()), b(b32.begin(), b32.end());
        if constexpr (std::is_same_v<T, BFloat16>) a = to_bf16(a32), b = to_bf16(b32);
        auto c = random_floats(static_cast<std::size_t>(m * n), 3);
        // beta 0 does not read C: a NaN there must not reach the result.
        if (beta == 0) c[5] = std::numeric_limits<float>::quiet_NaN();
        const auto want = reference(ta, tb, m, n, k, 2.0, a, lda, b, ldb, beta, c);
        gemm<T>(ta, tb, m, n, k, 2.0f, a.data(), lda, b.data(), ldb, beta, c.data(), n);
        for (std::size_t i = 0; i < c.size(); ++i)
          ASSERT_NEAR(c[i], want[i], 1e-4 * (1 + std::abs(want[i])))
              << "trans_a " << ta << " trans_b " << tb << " beta " << beta << " at " << i;
      }
    }
  }
}

TEST(MatmulTest, Float32MatchesLoopsInEveryTransposition) { expect_gemm_matches_loops<float>(); }

// bfloat16 operands, float32 accumulation and output: the loops sum the same bf16 values in
// double, so only the float32 accumulation separates them.
TEST(MatmulTest, BFloat16MatchesLoopsInEveryTransposition) {
  expect_gemm_matches_loops<BFloat16>();
}

// No rows: nothing written. No terms (k = 0): C = beta C, as BLAS has it.
TEST(MatmulTest, EmptyProducts) {
  std::vector<float> c{1, 2};
  gemm<float>(false, false, 0, 2, 3, 1, nullptr, 3, nullptr, 2, 0, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{1, 2}));
  gemm<float>(false, false, 1, 2, 0, 1, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1}));
  gemm<BFloat16>(false, false, 1, 2, 0, 1, nullptr, 1, nullptr, 2, 0, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0, 0}));
}

// Linear in bfloat16 computes what Linear in float32 computes on the same (bf16) values, over
// more rows than one fixed block, the residual add and both halves of backward included.
TEST(MatmulTest, LinearInBFloat16IsLinearOnTheRoundedValues) {
  const std::int64_t rows = 600, in = 48, out = 40;
  auto x = random_floats(rows * in, 1), w = random_floats(out * in, 2);
  auto dy = random_floats(rows * out, 3);
  for (auto* v : {&x, &w, &dy})
    for (float& e : *v) e = static_cast<float>(BFloat16(e));
  const auto xb = to_bf16(x), wb = to_bf16(w), dyb = to_bf16(dy);
  const auto y0 = random_floats(rows * out, 4);
  std::vector<float> y = y0, yb = y0, dx(x.size()), dxb(x.size()), dw(w.size()), dwb(w.size());
  linear_forward(x.data(), w.data(), y.data(), rows, in, out, /*accumulate=*/true);
  linear_forward(xb.data(), wb.data(), yb.data(), rows, in, out, /*accumulate=*/true);
  linear_backward(dy.data(), x.data(), w.data(), dx.data(), dw.data(), rows, in, out);
  linear_backward(dyb.data(), xb.data(), wb.data(), dxb.data(), dwb.data(), rows, in, out);
  auto near = [](const std::vector<float>& got, const std::vector<float>& want, double scale) {
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * scale * (1 + std::abs(want[i]))) << i;
  };
  near(yb, y, in);
  near(dxb, dx, out);
  near(dwb, dw, rows);
}

// The mixed-precision products from the float32 weight (rounded and packed by the product):
// against loops over the rounded values, with a last block shorter than the others, both
// with and without accumulating.
TEST(MatmulTest, BFloat16ProductsRoundTheFloat32Weight) {
  const std::int64_t rows = 1100, in = 40, out = 24;
  const auto x32 = random_floats(rows * in, 1), dy32 = random_floats(rows * out, 2);
  const auto w = random_floats(out * in, 3);  // not bf16 values: the product rounds them
  const auto x = to_bf16(x32), dy = to_bf16(dy32), w16 = to_bf16(w);
  for (bool accumulate : {false, true}) {
    auto y = random_floats(rows * out, 4), dx = random_floats(rows * in, 5);
    const auto y_want =
        reference(false, true, rows, out, in, 1.0, x, in, w16, in, accumulate ? 1.0 : 0.0, y);
    const auto dx_want =
        reference(false, false, rows, in, out, 1.0, dy, out, w16, in, accumulate ? 1.0 : 0.0, dx);
    linear_forward(x.data(), w.data(), y.data(), rows, in, out, accumulate);
    linear_backward_input(dy.data(), w.data(), dx.data(), rows, in, out, accumulate);
    for (std::size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], y_want[i], 1e-5 * in * (1 + std::abs(y_want[i]))) << i;
    for (std::size_t i = 0; i < dx.size(); ++i)
      ASSERT_NEAR(dx[i], dx_want[i], 1e-5 * out * (1 + std::abs(dx_want[i]))) << i;
  }
  // Written as bfloat16: the float32 sums rounded, so within half a bf16 step of them.
  std::vector<float> y(rows * out);
  std::vector<BFloat16> y16(rows * out);
  linear_forward(x.data(), w.data(), y.data(), rows, in, out);
  linear_forward(x.data(), w.data(), y16.data(), rows, in, out);
  for (std::size_t i = 0; i < y.size(); ++i)
    ASSERT_NEAR(float(y16[i]), y[i], std::abs(y[i]) / 256 + 1e-30) << i;
}

int process_threads() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// oneDNN's OpenMP runtime would start a team of threads per calling thread; weft's products
// run on the caller alone, on this thread and on a new one.
TEST(MatmulTest, ProductsRunOnTheCallingThreadAlone) {
  const std::int64_t n = 512;
  const auto a = random_floats(n * n, 1);
  std::vector<float> c(n * n);
  auto product = [&] {
    gemm<float>(false, false, n, n, n, 1, a.data(), n, a.data(), n, 0, c.data(), n);
  };
  const int before = process_threads();
  product();
  EXPECT_EQ(process_threads(), before);
  int during = 0;
  std::thread other([&] {
    product();
    during = process_threads();
  });
  other.join();
  EXPECT_EQ(during, before + 1);
}

// The start-up line's description of the path: emulated exactly when oneDNN has no bf16
// instructions to run (ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16, or an older CPU).
TEST(MatmulTest, IsaNamesWhetherBFloat16IsEmulated) {
  const std::string f32 = matmul_isa(DType::kFloat32), bf16 = matmul_isa(DType::kBFloat16);
  EXPECT_EQ(f32.find("emulated"), std::string::npos) << f32;
  EXPECT_EQ(bf16.find("(bf16 emulated)") != std::string::npos, !bf16_native()) << bf16;
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (cap != nullptr && (std::string(cap) == "AVX2" || std::string(cap) == "AVX512_CORE")) {
    EXPECT_FALSE(bf16_native());
    EXPECT_EQ(f32, std::string(cap) == "AVX2" ? "avx2" : "avx512_core");
  }
}

class ConvertTest : public weft::testing::OnEveryTarget {};
WEFT_ON_EVERY_TARGET(ConvertTest);

// Bitwise what BFloat16(float) gives, over a length with whole vectors of every width and a
// rest: ties to even both ways, the largest float rounding to infinity, subnormals, signed
// zeros, infinities and NaNs (which stay NaNs).
TEST_P(ConvertTest, ToBFloat16RoundsAsBFloat16Does) {
  auto x = random_floats(1000, 7);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special{0.0f,
                                   -0.0f,
                                   inf,
                                   -inf,
                                   std::numeric_limits<float>::quiet_NaN(),
                                   -std::numeric_limits<float>::quiet_NaN(),
                                   std::numeric_limits<float>::max(),
                                   std::numeric_limits<float>::denorm_min(),
                                   std::bit_cast<float>(0x3f808000u),   // tie, even below
                                   std::bit_cast<float>(0x3f818000u),   // tie, odd below: up
                                   std::bit_cast<float>(0x3f808001u),   // above the tie
                                   std::bit_cast<float>(0x7f800001u)};  // signalling NaN
  std::copy(special.begin(), special.end(), x.begin() + 500);
  std::vector<BFloat16> y(x.size());
  to_bfloat16(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(y[i].bits, BFloat16(x[i]).bits) << i << ": " << x[i];
  std::vector<float> back(x.size());
  to_float(y.data(), back.data(), static_cast<std::int64_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(back[i]), std::bit_cast<std::uint32_t>(float(y[i])))
        << i;
}

}  // namespace
}  // namespace weft::kernels

namespace weft::kernels {
namespace {

// Layout-invariant tensor parallelism (nn/feature_blocks.h) runs a block of features of a
// weight as one product whatever the slice around it: the strides of the operands must not
// change a bit of the result. Each product at strides of a slice of 1, 2 and 4 blocks, against
// the same product on packed copies.

// The first `width` columns of each of `rows` rows `ld` apart, packed.
template <class T>
std::vector<T> first_columns(const std::vector<T>& v, std::int64_t rows, std::int64_t ld,
                             std::int64_t width) {
  std::vector<T> packed(static_cast<std::size_t>(rows * width));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::copy_n(&v[static_cast<std::size_t>(r * ld)], width,
                &packed[static_cast<std::size_t>(r * width)]);
  }
  return packed;
}

// Bitwise, as memcmp (== would call -0 and +0 equal).
void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what;
}

template <class T>
void expect_strides_do_not_change_bits(std::int64_t rows, std::int64_t width, std::int64_t other) {
  for (const int slice : {1, 2, 4}) {
    const std::string at = ", slice of " + std::to_string(slice) + " blocks";
    const std::int64_t ld = width * slice;
    const auto as_t = [](const std::vector<float>& f) {
      return std::vector<T>(f.begin(), f.end());
    };
    const std::vector<T> x = as_t(random_floats(rows * ld, 11)),
                         w = as_t(random_floats(other * ld, 12)),
                         dy = as_t(random_floats(rows * other, 13));
    const std::vector<T> x0 = first_columns(x, rows, ld, width),
                         w0 = first_columns(w, other, ld, width);
    // y = x_block w_block^T: the block is the product's k.
    std::vector<float> y(static_cast<std::size_t>(rows * other)), y0(y.size());
    product_xwt(x.data(), ld, w.data(), ld, y.data(), other, rows, other, width, false);
    product_xwt(x0.data(), width, w0.data(), width, y0.data(), other, rows, other, width, false);
    expect_same_bits(y, y0, "y" + at);
    // dx_block (+)= dy w_block: the block is the product's n, written at strides.
    for (const bool add : {false, true}) {
      std::vector<float> dx = random_floats(rows * ld, 14);
      std::vector<float> dx0 = first_columns(dx, rows, ld, width);
      product_xw(dy.data(), other, w.data(), ld, dx.data(), ld, rows, width, other, add);
      product_xw(dy.data(), other, w0.data(), width, dx0.data(), width, rows, width, other, add);
      expect_same_bits(first_columns(dx, rows, ld, width), dx0,
                       "dx, add " + std::to_string(add) + at);
    }
    // dw_block = dy^T x_block.
    std::vector<float> dw(static_cast<std::size_t>(other * ld)),
        dw0(static_cast<std::size_t>(other * width));
    product_ytx(dy.data(), other, x.data(), ld, dw.data(), ld, rows, other, width, false);
    product_ytx(dy.data(), other, x0.data(), width, dw0.data(), width, rows, other, width, false);
    expect_same_bits(first_columns(dw, other, ld, width), dw0, "dw" + at);
  }
}

TEST(MatmulTest, StridesDoNotChangeFloat32Bits) {
  for (const auto& [rows, width, other] :
       {std::tuple{48, 24, 40}, {16, 8, 32}, {16, 24, 32}, {64, 64, 256}})
    expect_strides_do_not_change_bits<float>(rows, width, other);
}
TEST(MatmulTest, StridesDoNotChangeBFloat16Bits) {
  for (const auto& [rows, width, other] :
       {std::tuple{48, 24, 40}, {16, 8, 32}, {16, 24, 32}, {64, 64, 256}})
    expect_strides_do_not_change_bits<BFloat16>(rows, width, other);
}

}  // namespace
}  // namespace weft::kernels
