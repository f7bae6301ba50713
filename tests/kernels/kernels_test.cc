// Every kernel against a plain reference loop (float32), and every backward against central
// finite differences in float64 on random inputs: loss = sum(output * R) for a random R, so
// the analytic gradients come from the backward with dout = R.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "tests/support/simd_targets.h"
#include "weft/base/error.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/elementwise.h"
#include "weft/kernels/embedding.h"
#include "weft/kernels/internal/softmax_rows.h"
#include "weft/kernels/loss.h"
#include "weft/kernels/matmul.h"
#include "weft/kernels/rmsnorm.h"
#include "weft/kernels/rope.h"
#include "weft/kernels/swiglu.h"

namespace weft::kernels {
namespace {

using Vec = std::vector<double>;

// The suites of vector kernels run on every SIMD target (tests/support/simd_targets.h).
class RmsNormTest : public weft::testing::OnEveryTarget {};
class RopeTest : public weft::testing::OnEveryTarget {};
class SwigluTest : public weft::testing::OnEveryTarget {};
class CrossEntropyTest : public weft::testing::OnEveryTarget {};
class ElementwiseTest : public weft::testing::OnEveryTarget {};
class AttentionTest : public weft::testing::OnEveryTarget {};
class FastExpTest : public weft::testing::OnEveryTarget {};
WEFT_ON_EVERY_TARGET(RmsNormTest);
WEFT_ON_EVERY_TARGET(RopeTest);
WEFT_ON_EVERY_TARGET(SwigluTest);
WEFT_ON_EVERY_TARGET(CrossEntropyTest);
WEFT_ON_EVERY_TARGET(ElementwiseTest);
WEFT_ON_EVERY_TARGET(AttentionTest);
WEFT_ON_EVERY_TARGET(FastExpTest);

template <class T = double>
std::vector<T> random_vec(std::size_t n, unsigned seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks `grad` (analytic d loss / d x) against central differences of loss() in x, at up to
// 48 evenly spread elements.
void expect_gradient(Vec& x, const Vec& grad, const std::function<double()>& loss,
                     const std::string& what) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  const std::size_t step = std::max<std::size_t>(1, x.size() / 48);
  for (std::size_t i = 0; i < x.size(); i += step) {
    const double h = 1e-6 * std::max(1.0, std::abs(x[i]));
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(grad[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
        << what << " [" << i << "]";
  }
}

TEST(LinearTest, Gradients) {
  const std::int64_t rows = 6, in = 5, out = 4;
  Vec x = random_vec(rows * in, 1), w = random_vec(out * in, 2), r = random_vec(rows * out, 3);
  auto loss = [&] {
    Vec y(rows * out);
    linear_forward(x.data(), w.data(), y.data(), rows, in, out);
    return dot(y, r);
  };
  Vec dx(x.size()), dw(w.size(), 0.0);
  linear_backward(r.data(), x.data(), w.data(), dx.data(), dw.data(), rows, in, out);
  expect_gradient(x, dx, loss, "linear dx");
  expect_gradient(w, dw, loss, "linear dw");
}

// accumulate adds the product to y (the residual add of a transformer block).
TEST(LinearTest, ForwardAccumulateAddsTheProduct) {
  const std::int64_t rows = 300, in = 7, out = 5;  // more rows than one thread's share
  Vec x = random_vec(rows * in, 1), w = random_vec(out * in, 2), y0 = random_vec(rows * out, 3);
  Vec product(y0.size()), y = y0;
  linear_forward(x.data(), w.data(), product.data(), rows, in, out);
  linear_forward(x.data(), w.data(), y.data(), rows, in, out, /*accumulate=*/true);
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], y0[i] + product[i], 1e-12) << i;
}

TEST(EmbeddingTest, ForwardGathersRowsAndBackwardAccumulates) {
  const std::int64_t vocab = 5, dim = 3;
  const std::vector<std::int32_t> tokens{4, 0, 4, 2};
  Vec table = random_vec(vocab * dim, 1), r = random_vec(tokens.size() * dim, 2);
  auto loss = [&] {
    Vec out(tokens.size() * dim);
    embedding_forward(tokens.data(), 4, table.data(), vocab, dim, out.data());
    return dot(out, r);
  };
  Vec out(tokens.size() * dim);
  embedding_forward(tokens.data(), 4, table.data(), vocab, dim, out.data());
  EXPECT_EQ(out[1], table[4 * dim + 1]);
  Vec dtable(table.size(), 0.0);
  embedding_backward(tokens.data(), 4, r.data(), vocab, dim, dtable.data());
  expect_gradient(table, dtable, loss, "embedding dtable");
  const std::int32_t bad = 5;
  EXPECT_THROW(embedding_forward(&bad, 1, table.data(), vocab, dim, out.data()), InvalidArgument);
}

class AddRowsTest : public weft::testing::OnEveryTarget {};
WEFT_ON_EVERY_TARGET(AddRowsTest);

TEST_P(AddRowsTest, GivesAPlainLoopsBitsOnStridedRows) {
  const std::int64_t rows = 9, cols = 37, y_stride = 50, x_stride = 41;  // 37 = 2 x 16 + 5
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  std::vector<float> y(rows * y_stride), x(rows * x_stride);
  for (float& v : y) v = normal(gen);
  for (float& v : x) v = normal(gen);
  std::vector<float> expected = y;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) expected[r * y_stride + c] += x[r * x_stride + c];
  add_rows(y.data(), y_stride, x.data(), x_stride, rows, cols);
  EXPECT_EQ(y, expected);  // the columns past `cols` untouched too
}

TEST_P(RmsNormTest, MatchesTheFormulaAndItsGradients) {
  const std::int64_t rows = 3, dim = 8;
  Vec x = random_vec(rows * dim, 1), w = random_vec(dim, 2), r = random_vec(rows * dim, 3);
  Vec y(x.size()), rstd(rows);
  rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, dim, 1e-5);
  double ms = 0;
  for (std::int64_t j = 0; j < dim; ++j) ms += x[j] * x[j] / dim;
  EXPECT_NEAR(y[3], x[3] / std::sqrt(ms + 1e-5) * w[3], 1e-12);
  auto loss = [&] {
    Vec yy(x.size()), s(rows);
    rmsnorm_forward(x.data(), w.data(), yy.data(), s.data(), rows, dim, 1e-5);
    return dot(yy, r);
  };
  Vec dx(x.size()), dw(dim, 0.0);
  rmsnorm_backward(r.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), rows, dim);
  expect_gradient(x, dx, loss, "rmsnorm dx");
  expect_gradient(w, dw, loss, "rmsnorm dw");

  Vec base = random_vec(x.size(), 4), sum = base, dw2(dim, 0.0);  // accumulate_dx adds dx
  rmsnorm_backward(r.data(), x.data(), w.data(), rstd.data(), sum.data(), dw2.data(), rows, dim,
                   /*accumulate_dx=*/true);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(sum[i], base[i] + dx[i], 1e-12) << i;
  EXPECT_EQ(dw2, dw);
}

// Mixed precision's kernels write bfloat16 for the products: bitwise the float32 kernel's
// result rounded to nearest even (they compute the same float32 lanes), hence within bf16's
// rounding, a relative 2^-8, of the plain double loop.
void expect_bfloat16_of(const std::vector<float>& f32, const BFloat16* got, const Vec& exact,
                        const char* what) {
  for (std::size_t i = 0; i < f32.size(); ++i) {
    ASSERT_EQ(got[i].bits, BFloat16(f32[i]).bits) << what << " " << i;
    ASSERT_NEAR(float(got[i]), exact[i], std::abs(exact[i]) / 256 + 1e-30) << what << " " << i;
  }
}

std::vector<float> floats_of(const Vec& v) { return {v.begin(), v.end()}; }

TEST_P(RmsNormTest, BFloat16OutputIsTheFloat32OneRounded) {
  const std::int64_t rows = 5, dim = 37;  // whole vectors of every width and a rest
  const Vec x = random_vec(rows * dim, 1, 3.0), w = random_vec(dim, 2);
  Vec exact(x.size()), rstd_exact(rows);
  rmsnorm_forward(x.data(), w.data(), exact.data(), rstd_exact.data(), rows, dim, 1e-5);
  const auto xf = floats_of(x), wf = floats_of(w);
  std::vector<float> y(x.size()), rstd(rows), rstd16(rows);
  rmsnorm_forward(xf.data(), wf.data(), y.data(), rstd.data(), rows, dim, 1e-5);
  std::vector<BFloat16> y16(x.size());
  rmsnorm_forward(xf.data(), wf.data(), y16.data(), rstd16.data(), rows, dim, 1e-5);
  expect_bfloat16_of(y, y16.data(), exact, "y");
  EXPECT_EQ(rstd16, rstd);
}

TEST_P(RopeTest, RotatesPairsAndItsBackwardIsTheTranspose) {
  const std::int64_t b = 2, t = 5, h = 3, d = 8;
  const double theta = 10000.0;
  Vec x = random_vec(b * t * h * d, 1), r = random_vec(x.size(), 2);
  Vec y = x;
  rope_forward(y.data(), b, t, h, d, theta, 3);
  // Position 3 + 4 of batch 1, head 2, pair 1, as a complex multiplication.
  const std::int64_t at = ((1 * t + 4) * h + 2) * d + 2;
  const double angle = 7.0 * std::pow(theta, -2.0 / d);
  EXPECT_NEAR(y[at], x[at] * std::cos(angle) - x[at + 1] * std::sin(angle), 1e-12);
  EXPECT_NEAR(y[at + 1], x[at] * std::sin(angle) + x[at + 1] * std::cos(angle), 1e-12);
  auto loss = [&] {
    Vec yy = x;
    rope_forward(yy.data(), b, t, h, d, theta, 3);
    return dot(yy, r);
  };
  Vec dx = r;
  rope_backward(dx.data(), b, t, h, d, theta, 3);
  expect_gradient(x, dx, loss, "rope dx");
}

// float rows of whole vectors plus a rest (head_dim 40 = 16 + 16 + 8), inside wider rows as in
// the fused q|k|v layout: each pair against the rotation in double, the other columns
// untouched, and the backward undoing the forward.
TEST_P(RopeTest, FloatVectorsAndRestMatchThePairLoop) {
  const std::int64_t b = 2, t = 7, h = 3, d = 40, stride = h * d + 24, first = 5;
  const double theta = 10000.0;
  std::vector<float> x(static_cast<std::size_t>(b * t * stride));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i));
  std::vector<float> y = x;
  rope_forward(y.data(), b, t, h, d, theta, first, stride);
  for (std::int64_t row = 0; row < b * t; ++row) {
    const std::int64_t position = row % t + first;
    for (std::int64_t c = 0; c < stride; c += 2) {
      const auto at = static_cast<std::size_t>(row * stride + c);
      if (c >= h * d) {
        ASSERT_EQ(y[at], x[at]);
        ASSERT_EQ(y[at + 1], x[at + 1]);
        continue;
      }
      const double angle = position * std::pow(theta, -static_cast<double>(c % d) / d);
      ASSERT_NEAR(y[at], x[at] * std::cos(angle) - x[at + 1] * std::sin(angle), 1e-5) << at;
      ASSERT_NEAR(y[at + 1], x[at] * std::sin(angle) + x[at + 1] * std::cos(angle), 1e-5) << at;
    }
  }
  rope_backward(y.data(), b, t, h, d, theta, first, stride);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 1e-5) << i;
}

// Mixed precision: the rotation of q's and k's heads and the rest of the fused row (v's heads)
// written out of place in bfloat16 are bitwise rope_forward (rope_backward) in place, then
// rounded; the input is left as it was. head_dim 20 (a vector and a rest on AVX2), 24 columns of
// v (a vector and a scalar rest).
TEST_P(RopeTest, BFloat16OutputIsTheFloat32OneRounded) {
  const std::int64_t b = 2, t = 9, h = 3, d = 20, width = h * d + 24, first = 3;
  std::vector<float> x(static_cast<std::size_t>(b * t * width));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.91 * i) * 3);
  for (const bool backward : {false, true}) {
    std::vector<float> want = x;
    const auto in_place = backward ? rope_backward<float> : rope_forward<float>;
    in_place(want.data(), b, t, h, d, 10000.0, first, width);
    const std::vector<float> before = x;
    std::vector<BFloat16> got(x.size());
    const auto bf16 = backward ? rope_backward_bf16 : rope_forward_bf16;
    bf16(x.data(), got.data(), b, t, h, d, 10000.0, first, width);
    ASSERT_EQ(x, before);
    for (std::size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(got[i].bits, BFloat16(want[i]).bits) << (backward ? "backward " : "forward ") << i;
  }
}

TEST_P(SwigluTest, Gradients) {
  const std::int64_t n = 50;
  Vec a = random_vec(n, 1, 2.0), bb = random_vec(n, 2), r = random_vec(n, 3);
  auto loss = [&] {
    Vec h(n);
    swiglu_forward(a.data(), bb.data(), h.data(), n);
    return dot(h, r);
  };
  Vec h(n);
  swiglu_forward(a.data(), bb.data(), h.data(), n);
  EXPECT_NEAR(h[0], a[0] / (1 + std::exp(-a[0])) * bb[0], 1e-12);
  Vec da = a, db = bb;  // the backward replaces them by the gradients
  swiglu_backward(r.data(), da.data(), db.data(), n);
  expect_gradient(a, da, loss, "swiglu da");
  expect_gradient(bb, db, loss, "swiglu db");
}

// The fused w1|w3 layout (a and b the two halves of each row), rows of a width with a rest;
// in mixed precision a and b are bfloat16 (w1|w3's product writes them so): the inputs here
// are values bfloat16 holds exactly, so that every path starts from the same numbers.
TEST_P(SwigluTest, BFloat16OutputsAreTheFloat32OnesRounded) {
  const std::int64_t rows = 4, cols = 37, stride = 2 * cols;
  Vec ab = random_vec(rows * stride, 1, 2.0);
  for (double& v : ab) v = static_cast<float>(BFloat16(static_cast<float>(v)));
  const Vec dh = random_vec(rows * cols, 2);
  Vec h_exact(rows * cols), dab_exact = ab;
  swiglu_forward(ab.data(), ab.data() + cols, h_exact.data(), rows, cols, stride);
  swiglu_backward(dh.data(), dab_exact.data(), dab_exact.data() + cols, rows, cols, stride);
  std::vector<float> abf = floats_of(ab), h(rows * cols), dab = abf;
  swiglu_forward(abf.data(), abf.data() + cols, h.data(), rows, cols, stride);
  swiglu_backward(floats_of(dh).data(), dab.data(), dab.data() + cols, rows, cols, stride);

  const std::vector<BFloat16> ab16(abf.begin(), abf.end());
  std::vector<BFloat16> h16(rows * cols);
  swiglu_forward(ab16.data(), ab16.data() + cols, h16.data(), rows, cols, stride);
  expect_bfloat16_of(h, h16.data(), h_exact, "h");
  std::vector<float> dhf = floats_of(dh);
  const BFloat16* dab16 =
      swiglu_backward_bf16(dhf.data(), ab16.data(), ab16.data() + cols, rows, cols, stride);
  EXPECT_EQ(static_cast<const void*>(dab16), static_cast<const void*>(dhf.data()));
  expect_bfloat16_of(dab, dab16, dab_exact, "da|db");
  for (std::size_t i = 0; i < ab16.size(); ++i)  // a and b left as they are
    ASSERT_EQ(float(ab16[i]), abf[i]) << i;
}

TEST_P(CrossEntropyTest, MatchesLogSoftmaxAndItsGradient) {
  const std::int64_t n = 4, vocab = 7;
  Vec logits = random_vec(n * vocab, 1, 3.0);
  const std::vector<std::int32_t> targets{0, 6, 3, 3};
  Vec losses(n);
  const double total =
      cross_entropy_forward(logits.data(), targets.data(), n, vocab, losses.data());
  double sum_exp = 0;
  for (std::int64_t j = 0; j < vocab; ++j) sum_exp += std::exp(logits[vocab + j]);
  EXPECT_NEAR(losses[1], std::log(sum_exp) - logits[vocab + 6], 1e-12);
  EXPECT_NEAR(total, losses[0] + losses[1] + losses[2] + losses[3], 1e-12);
  auto loss = [&] {
    Vec l(n);
    return cross_entropy_forward(logits.data(), targets.data(), n, vocab, l.data()) / n;
  };
  Vec dlogits(logits.size());
  cross_entropy_backward(logits.data(), targets.data(), n, vocab, 1.0 / n, dlogits.data());
  expect_gradient(logits, dlogits, loss, "cross_entropy dlogits");
  const std::int32_t bad = -1;
  EXPECT_THROW(cross_entropy_forward(logits.data(), &bad, 1, vocab, losses.data()),
               InvalidArgument);
}

// Loss parallel: two uneven shards of the vocabulary, combined as the model combines them
// across ranks (max of the maxima, sum of the sums), give the whole rows' losses and gradient.
// Mixed precision: the gradients written in bfloat16 are bitwise the float32 ones rounded,
// the whole rows' and a shard's (vocab 37: vectors of every width and a rest; targets inside
// and outside the shard).
TEST_P(CrossEntropyTest, BFloat16GradientsAreTheFloat32OnesRounded) {
  const std::int64_t n = 5, vocab = 37, first = 10, shard = 21;
  const std::vector<float> logits = random_vec<float>(n * vocab, 3, 3.0);
  const std::vector<std::int32_t> targets{0, 36, 12, 30, 10};
  std::vector<float> want(logits.size());
  cross_entropy_backward(logits.data(), targets.data(), n, vocab, 0.25, want.data());
  std::vector<BFloat16> got(logits.size());
  cross_entropy_backward(logits.data(), targets.data(), n, vocab, 0.25, got.data());
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i].bits, BFloat16(want[i]).bits) << i;

  std::vector<float> columns(static_cast<std::size_t>(n * shard)), shift(n);
  for (std::int64_t i = 0; i < n; ++i) {
    std::copy_n(logits.begin() + i * vocab + first, shard, columns.begin() + i * shard);
    double sum = 0, max = -1e30;
    for (std::int64_t j = 0; j < vocab; ++j) max = std::max<double>(max, logits[i * vocab + j]);
    for (std::int64_t j = 0; j < vocab; ++j) sum += std::exp(logits[i * vocab + j] - max);
    shift[i] = static_cast<float>(max + std::log(sum));
  }
  std::vector<float> want_shard(columns.size());
  std::vector<BFloat16> got_shard(columns.size());
  cross_entropy_shard_backward(columns.data(), targets.data(), n, vocab, first, shard, shift.data(),
                               0.25, want_shard.data());
  cross_entropy_shard_backward(columns.data(), targets.data(), n, vocab, first, shard, shift.data(),
                               0.25, got_shard.data());
  for (std::size_t i = 0; i < want_shard.size(); ++i)
    ASSERT_EQ(got_shard[i].bits, BFloat16(want_shard[i]).bits) << "shard " << i;
}

TEST_P(CrossEntropyTest, ShardsCombineToTheWholeRows) {
  const std::int64_t n = 5, vocab = 37, split = 16;
  Vec logits = random_vec(n * vocab, 4, 3.0);
  const std::vector<std::int32_t> targets{0, 15, 16, 36, 20};
  Vec losses(n), whole_grad(n * vocab);
  cross_entropy_forward(logits.data(), targets.data(), n, vocab, losses.data());
  cross_entropy_backward(logits.data(), targets.data(), n, vocab, 0.5, whole_grad.data());
  const std::int64_t first[2] = {0, split}, width[2] = {split, vocab - split};
  Vec shard[2], max[2], sums[2], target[2];
  for (int r = 0; r < 2; ++r) {
    for (std::int64_t i = 0; i < n; ++i)
      shard[r].insert(shard[r].end(), logits.begin() + i * vocab + first[r],
                      logits.begin() + i * vocab + first[r] + width[r]);
    max[r].resize(n);
    cross_entropy_shard_max(shard[r].data(), n, width[r], max[r].data());
  }
  Vec global_max(n), shift(n);
  for (std::int64_t i = 0; i < n; ++i) global_max[i] = std::max(max[0][i], max[1][i]);
  for (int r = 0; r < 2; ++r) {
    sums[r].resize(n);
    target[r].resize(n);
    cross_entropy_shard_sums(shard[r].data(), targets.data(), n, vocab, first[r], width[r],
                             global_max.data(), sums[r].data(), target[r].data());
  }
  for (std::int64_t i = 0; i < n; ++i) {
    shift[i] = global_max[i] + std::log(sums[0][i] + sums[1][i]);
    EXPECT_NEAR(shift[i] - target[0][i] - target[1][i], losses[i], 1e-12) << "row " << i;
  }
  // The same columns read in place, at the whole row's stride: the same bits.
  for (int r = 0; r < 2; ++r) {
    Vec strided_sums(n), strided_target(n);
    cross_entropy_shard_sums(logits.data() + first[r], targets.data(), n, vocab, first[r], width[r],
                             global_max.data(), strided_sums.data(), strided_target.data(), vocab);
    EXPECT_EQ(strided_sums, sums[r]) << "shard " << r;
    EXPECT_EQ(strided_target, target[r]) << "shard " << r;
  }
  for (int r = 0; r < 2; ++r) {
    Vec grad(n * width[r]);
    cross_entropy_shard_backward(shard[r].data(), targets.data(), n, vocab, first[r], width[r],
                                 shift.data(), 0.5, grad.data());
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < width[r]; ++j)
        EXPECT_NEAR(grad[i * width[r] + j], whole_grad[i * vocab + first[r] + j], 1e-12)
            << "row " << i << ", column " << first[r] + j;
    }
  }
}

TEST_P(ElementwiseTest, ScaleSumSquares) {
  std::vector<float> y{2, 3, 4};
  scale(y.data(), 2.0f, 3);
  EXPECT_EQ(y, (std::vector<float>{4, 6, 8}));
  EXPECT_EQ(sum_squares(y.data(), 3), 116.0);
}

// Blocked and laned, against a long double running sum: uneven blocks and a ragged tail.
TEST_P(ElementwiseTest, SumSquaresMatchesAPlainSum) {
  std::vector<float> x(100'003);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.001f * static_cast<float>(i)) * 3.0f;
  long double plain = 0;
  for (float v : x) plain += static_cast<long double>(v) * v;
  const double got = sum_squares(x.data(), static_cast<std::int64_t>(x.size()));
  EXPECT_NEAR(got, static_cast<double>(plain), 1e-12 * static_cast<double>(plain));
}

// The plain definition: softmax over the whole causal row, then the weighted sum of values.
template <class T>
std::vector<T> reference_attention(const AttentionShape& s, const std::vector<T>& q,
                                   const std::vector<T>& k, const std::vector<T>& v) {
  const std::int64_t d = s.head_dim, group = s.heads / s.kv_heads;
  std::vector<T> out(q.size());
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      for (std::int64_t i = 0; i < s.seq; ++i) {
        std::vector<double> p(static_cast<std::size_t>(i + 1));
        double max = -1e300, sum = 0;
        const T* qi = &q[((b * s.seq + i) * s.heads + h) * d];
        for (std::int64_t j = 0; j <= i; ++j) {
          const T* kj = &k[((b * s.seq + j) * s.kv_heads + h / group) * d];
          double dp = 0;
          for (std::int64_t x = 0; x < d; ++x) dp += static_cast<double>(qi[x]) * kj[x];
          p[j] = dp / std::sqrt(static_cast<double>(d));
          max = std::max(max, p[j]);
        }
        for (auto& e : p) sum += (e = std::exp(e - max));
        for (std::int64_t x = 0; x < d; ++x) {
          double o = 0;
          for (std::int64_t j = 0; j <= i; ++j)
            o += p[j] / sum * v[((b * s.seq + j) * s.kv_heads + h / group) * d + x];
          out[((b * s.seq + i) * s.heads + h) * d + x] = static_cast<T>(o);
        }
      }
    }
  }
  return out;
}

TEST_P(AttentionTest, TiledForwardMatchesTheDefinition) {
  for (const AttentionShape& s :
       {AttentionShape{2, 70, 4, 2, 16}, AttentionShape{1, 33, 2, 2, 8},
        AttentionShape{1, 1, 3, 1, 4}, AttentionShape{1, 300, 2, 1, 16}}) {
    const auto nq = static_cast<std::size_t>(s.batch * s.seq * s.heads * s.head_dim);
    const auto nkv = static_cast<std::size_t>(s.batch * s.seq * s.kv_heads * s.head_dim);
    auto q = random_vec<float>(nq, 1), k = random_vec<float>(nkv, 2), v = random_vec<float>(nkv, 3);
    std::vector<float> out(nq), lse(static_cast<std::size_t>(s.batch * s.heads * s.seq));
    attention_forward(s, q.data(), k.data(), v.data(), out.data(), lse.data());
    const auto want = reference_attention(s, q, k, v);
    for (std::size_t i = 0; i < nq; ++i)
      ASSERT_NEAR(out[i], want[i], 2e-5) << "seq " << s.seq << " at " << i;
  }
}

// The plain backward of reference_attention: per query row, the softmax's probabilities p,
// then dv_j += p_j dO, ds_j = p_j (dO . v_j - sum_j' p_j' dO . v_j'), dq += scale ds_j k_j and
// dk_j += scale ds_j q.
void reference_attention_backward(const AttentionShape& s, const Vec& q, const Vec& k, const Vec& v,
                                  const Vec& dout, Vec& dq, Vec& dk, Vec& dv) {
  const std::int64_t d = s.head_dim, group = s.heads / s.kv_heads;
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  auto at = [&](std::int64_t b, std::int64_t t, std::int64_t heads, std::int64_t h) {
    return static_cast<std::size_t>(((b * s.seq + t) * heads + h) * d);
  };
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      for (std::int64_t i = 0; i < s.seq; ++i) {
        std::vector<double> p(static_cast<std::size_t>(i + 1)), dp(p.size());
        double max = -1e300, sum = 0, mean = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double e = 0;
          for (std::int64_t x = 0; x < d; ++x) {
            e += q[at(b, i, s.heads, h) + x] * k[at(b, j, s.kv_heads, h / group) + x];
          }
          max = std::max(max, p[j] = e * scale);
        }
        for (auto& e : p) sum += (e = std::exp(e - max));
        for (std::int64_t j = 0; j <= i; ++j) {
          p[j] /= sum;
          for (std::int64_t x = 0; x < d; ++x) {
            dv[at(b, j, s.kv_heads, h / group) + x] += p[j] * dout[at(b, i, s.heads, h) + x];
            dp[j] += dout[at(b, i, s.heads, h) + x] * v[at(b, j, s.kv_heads, h / group) + x];
          }
          mean += p[j] * dp[j];
        }
        for (std::int64_t j = 0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - mean) * scale;
          for (std::int64_t x = 0; x < d; ++x) {
            dq[at(b, i, s.heads, h) + x] += ds * k[at(b, j, s.kv_heads, h / group) + x];
            dk[at(b, j, s.kv_heads, h / group) + x] += ds * q[at(b, i, s.heads, h) + x];
          }
        }
      }
    }
  }
}

// Longer than one block of keys (forward) and of queries (backward): the running softmax
// carries across blocks and the backward's row blocks add up. Head sizes of whole vectors
// (16 floats or 8 doubles each: 80 is blocks of four and one, 48 of three floats, 24 of three
// doubles, 32 of two floats), of vectors and a scalar rest (20), and of scalars only (4), in
// float64 and in float.
TEST_P(AttentionTest, SequencesLongerThanABlockMatchThePlainLoops) {
  for (const AttentionShape& s :
       {AttentionShape{1, 300, 2, 1, 4}, AttentionShape{1, 300, 2, 1, 80},
        AttentionShape{2, 70, 2, 2, 20}, AttentionShape{1, 100, 4, 2, 48},
        AttentionShape{1, 90, 2, 2, 32}, AttentionShape{1, 70, 2, 1, 24}}) {
    SCOPED_TRACE("head_dim " + std::to_string(s.head_dim));
    const auto nq = static_cast<std::size_t>(s.batch * s.seq * s.heads * s.head_dim);
    const auto nkv = static_cast<std::size_t>(s.batch * s.seq * s.kv_heads * s.head_dim);
    Vec q = random_vec(nq, 1, 2.0), k = random_vec(nkv, 2, 2.0), v = random_vec(nkv, 3),
        r = random_vec(nq, 4);
    Vec out(nq), lse(static_cast<std::size_t>(s.batch * s.heads * s.seq));
    attention_forward(s, q.data(), k.data(), v.data(), out.data(), lse.data());
    const Vec want = reference_attention(s, q, k, v);
    for (std::size_t i = 0; i < nq; ++i) ASSERT_NEAR(out[i], want[i], 1e-12) << "out " << i;
    // The gradients start as NaN: the backward overwrites them, it does not add to them.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Vec dq(nq, nan), dk(nkv, nan), dv(nkv, nan), want_dq(nq), want_dk(nkv), want_dv(nkv);
    attention_backward(s, q.data(), k.data(), v.data(), out.data(), r.data(), lse.data(), dq.data(),
                       dk.data(), dv.data());
    reference_attention_backward(s, q, k, v, r, want_dq, want_dk, want_dv);
    for (std::size_t i = 0; i < nq; ++i) ASSERT_NEAR(dq[i], want_dq[i], 1e-12) << "dq " << i;
    for (std::size_t i = 0; i < nkv; ++i) ASSERT_NEAR(dk[i], want_dk[i], 1e-12) << "dk " << i;
    for (std::size_t i = 0; i < nkv; ++i) ASSERT_NEAR(dv[i], want_dv[i], 1e-12) << "dv " << i;

    // float, the training path (the fast exp, FMA where the vector clone contracts).
    auto narrow = [](const Vec& x) { return std::vector<float>(x.begin(), x.end()); };
    std::vector<float> qf = narrow(q), kf = narrow(k), vf = narrow(v), rf = narrow(r);
    const float nanf = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> of(nq), lf(lse.size()), dqf(nq, nanf), dkf(nkv, nanf), dvf(nkv, nanf);
    attention_forward(s, qf.data(), kf.data(), vf.data(), of.data(), lf.data());
    for (std::size_t i = 0; i < nq; ++i) ASSERT_NEAR(of[i], want[i], 1e-5) << "float out " << i;
    attention_backward(s, qf.data(), kf.data(), vf.data(), of.data(), rf.data(), lf.data(),
                       dqf.data(), dkf.data(), dvf.data());
    for (std::size_t i = 0; i < nq; ++i) ASSERT_NEAR(dqf[i], want_dq[i], 1e-4) << "float dq " << i;
    for (std::size_t i = 0; i < nkv; ++i) ASSERT_NEAR(dkf[i], want_dk[i], 1e-4) << "float dk " << i;
    for (std::size_t i = 0; i < nkv; ++i) ASSERT_NEAR(dvf[i], want_dv[i], 1e-4) << "float dv " << i;
  }
}

// Ring attention's arithmetic: a sequence of 4 chunks, each chunk's queries against every
// chunk up to its own (earlier ones whole, with the offset of their positions; its own
// causally), the blocks merged with attention_merge, and each block's backward run with the
// merged output and lse, summed: the whole sequence's attention and gradients. Chunks of 150
// rows cross the kernels' 64-row tiles and 256-key blocks.
TEST_P(AttentionTest, BlocksMergedEqualTheWholeSequence) {
  for (const std::int64_t chunk : {std::int64_t{150}, std::int64_t{33}}) {
    const std::int64_t chunks = 4, heads = 4, kv_heads = 2, d = 16, len = chunks * chunk;
    const AttentionShape whole{1, len, heads, kv_heads, d};
    const auto nq = static_cast<std::size_t>(len * heads * d);
    const auto nkv = static_cast<std::size_t>(len * kv_heads * d);
    Vec q = random_vec(nq, 1, 2.0), k = random_vec(nkv, 2, 2.0), v = random_vec(nkv, 3),
        r = random_vec(nq, 4);
    Vec want(nq), want_lse(static_cast<std::size_t>(heads * len)), want_dq(nq), want_dk(nkv),
        want_dv(nkv);
    attention_forward(whole, q.data(), k.data(), v.data(), want.data(), want_lse.data());
    attention_backward(whole, q.data(), k.data(), v.data(), want.data(), r.data(), want_lse.data(),
                       want_dq.data(), want_dk.data(), want_dv.data());

    const std::int64_t qrow = heads * d, kvrow = kv_heads * d;
    const auto block = [&](std::int64_t i, std::int64_t j) {  // chunk i's queries, chunk j's keys
      return AttentionShape{.batch = 1,
                            .seq = chunk,
                            .heads = heads,
                            .kv_heads = kv_heads,
                            .head_dim = d,
                            .causal_offset = (i - j) * chunk};
    };
    Vec out(nq), dq(nq, 0.0), dk(nkv, 0.0), dv(nkv, 0.0);
    for (std::int64_t i = 0; i < chunks; ++i) {
      Vec lse(static_cast<std::size_t>(heads * chunk)),
          part(static_cast<std::size_t>(chunk * qrow)), part_lse(lse.size());
      double* o = out.data() + i * chunk * qrow;
      for (std::int64_t j = 0; j <= i; ++j) {
        double* to = j == 0 ? o : part.data();
        double* to_lse = j == 0 ? lse.data() : part_lse.data();
        attention_forward(block(i, j), q.data() + i * chunk * qrow, k.data() + j * chunk * kvrow,
                          v.data() + j * chunk * kvrow, to, to_lse);
        if (j > 0) attention_merge(1, chunk, heads, d, o, lse.data(), part.data(), part_lse.data());
      }
      for (std::int64_t x = 0; x < chunk * qrow; ++x)
        ASSERT_NEAR(o[x], want[static_cast<std::size_t>(i * chunk * qrow + x)], 1e-12);
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t t = 0; t < chunk; ++t) {
          ASSERT_NEAR(lse[static_cast<std::size_t>(h * chunk + t)],
                      want_lse[static_cast<std::size_t>(h * len + i * chunk + t)], 1e-12);
        }
      }
      Vec gq(static_cast<std::size_t>(chunk * qrow)), gk(static_cast<std::size_t>(chunk * kvrow)),
          gv(gk.size());
      for (std::int64_t j = 0; j <= i; ++j) {
        attention_backward(block(i, j), q.data() + i * chunk * qrow, k.data() + j * chunk * kvrow,
                           v.data() + j * chunk * kvrow, o, r.data() + i * chunk * qrow, lse.data(),
                           gq.data(), gk.data(), gv.data());
        for (std::int64_t x = 0; x < chunk * qrow; ++x) dq[i * chunk * qrow + x] += gq[x];
        for (std::int64_t x = 0; x < chunk * kvrow; ++x) {
          dk[j * chunk * kvrow + x] += gk[x];
          dv[j * chunk * kvrow + x] += gv[x];
        }
      }
    }
    for (std::size_t i = 0; i < nq; ++i) ASSERT_NEAR(dq[i], want_dq[i], 1e-12) << "dq " << i;
    for (std::size_t i = 0; i < nkv; ++i) ASSERT_NEAR(dk[i], want_dk[i], 1e-12) << "dk " << i;
    for (std::size_t i = 0; i < nkv; ++i) ASSERT_NEAR(dv[i], want_dv[i], 1e-12) << "dv " << i;
  }
}

TEST(AttentionShapeTest, RejectsKeysNoQuerySees) {
  const std::vector<float> x(65 * 4, 0.5f);
  std::vector<float> out(x.size()), lse(64);
  // 64 queries at offset 0 see keys 0..63 only: key 64 would get no gradient.
  const AttentionShape s{
      .batch = 1, .seq = 64, .heads = 1, .kv_heads = 1, .head_dim = 4, .kv_seq = 65};
  EXPECT_DEATH(attention_forward(s, x.data(), x.data(), x.data(), out.data(), lse.data()),
               "kv_seq");
}

// A non-finite value in one batch's inputs stays in that batch: the backward's buffers, reused
// across heads and batches, hold entries that causal tiles skip.
TEST_P(AttentionTest, NonFiniteInputsDoNotReachOtherBatches) {
  const AttentionShape s{2, 100, 2, 2, 32};
  const auto per_batch = static_cast<std::size_t>(s.seq * s.heads * s.head_dim);
  auto q = random_vec<float>(2 * per_batch, 1), k = random_vec<float>(2 * per_batch, 2);
  auto v = random_vec<float>(2 * per_batch, 3), r = random_vec<float>(2 * per_batch, 4);
  auto gradients = [&](const std::vector<float>& vv) {
    std::vector<float> out(q.size()), lse(static_cast<std::size_t>(2 * s.heads * s.seq));
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    attention_forward(s, q.data(), k.data(), vv.data(), out.data(), lse.data());
    attention_backward(s, q.data(), k.data(), vv.data(), out.data(), r.data(), lse.data(),
                       dq.data(), dk.data(), dv.data());
    return std::vector<std::vector<float>>{dq, dk, dv};
  };
  const auto clean = gradients(v);
  auto poisoned = v;
  poisoned[per_batch / 2] = std::numeric_limits<float>::infinity();  // batch 0 only
  const auto got = gradients(poisoned);
  for (std::size_t g = 0; g < 3; ++g) {
    for (std::size_t i = per_batch; i < 2 * per_batch; ++i) {
      ASSERT_EQ(got[g][i], clean[g][i]) << "gradient " << g << " of batch 1 at " << i;
    }
  }
}

TEST_P(AttentionTest, BackwardMatchesFiniteDifferences) {
  const AttentionShape s{2, 70, 4, 2, 8};  // two key tiles, grouped heads
  const auto nq = static_cast<std::size_t>(s.batch * s.seq * s.heads * s.head_dim);
  const auto nkv = static_cast<std::size_t>(s.batch * s.seq * s.kv_heads * s.head_dim);
  Vec q = random_vec(nq, 1), k = random_vec(nkv, 2), v = random_vec(nkv, 3), r = random_vec(nq, 4);
  Vec out(nq), lse(static_cast<std::size_t>(s.batch * s.heads * s.seq));
  auto loss = [&] {
    Vec o(nq), l(lse.size());
    attention_forward(s, q.data(), k.data(), v.data(), o.data(), l.data());
    return dot(o, r);
  };
  attention_forward(s, q.data(), k.data(), v.data(), out.data(), lse.data());
  Vec dq(nq), dk(nkv), dv(nkv);
  attention_backward(s, q.data(), k.data(), v.data(), out.data(), r.data(), lse.data(), dq.data(),
                     dk.data(), dv.data());
  expect_gradient(q, dq, loss, "attention dq");
  expect_gradient(k, dk, loss, "attention dk");
  expect_gradient(v, dv, loss, "attention dv");
}

}  // namespace
}  // namespace weft::kernels

namespace weft::kernels {
namespace {

// exp through exp_block (p = exp(p - 0)), in one row: whole vectors and a one-lane rest.
std::vector<float> fast_exp(std::vector<float> x) {
  const float shift = 0.0f;
  internal::exp_block(x.data(), static_cast<std::int64_t>(x.size()), 1,
                      static_cast<std::int64_t>(x.size()), &shift);
  return x;
}

TEST_P(FastExpTest, WithinTwoUlpOfStdExp) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.0f; v += 0.0137f) x.push_back(v);
  const std::vector<float> got = fast_exp(x);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::abs(got[i] - want) / want);
  }
  EXPECT_LT(worst, 2.5e-7);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> edges = fast_exp({-1e30f, -kInf, 0.0f, -87.5f, 1.0f});
  EXPECT_EQ(edges[0], 0.0f);
  EXPECT_EQ(edges[1], 0.0f);
  EXPECT_EQ(edges[2], 1.0f);
  EXPECT_EQ(edges[3], 0.0f);
  EXPECT_NEAR(edges[4], std::exp(1.0), 3e-7);
  EXPECT_TRUE(std::isnan(fast_exp({std::numeric_limits<float>::quiet_NaN()})[0]));
}

}  // namespace
}  // namespace weft::kernels

namespace weft::kernels {
namespace {

// q, k and v as column blocks of one fused row (the q|k|v projection's output) give the
// results of the packed layout, bitwise, and RoPE reads the same rows with a stride.
TEST_P(AttentionTest, FusedQkvLayoutGivesThePackedResults) {
  const AttentionShape packed{2, 40, 4, 2, 8};
  const std::int64_t rows = 2 * 40, qw = 4 * 8, kw = 2 * 8, width = qw + 2 * kw;
  auto q = random_vec<float>(rows * qw, 1), k = random_vec<float>(rows * kw, 2);
  auto v = random_vec<float>(rows * kw, 3), g = random_vec<float>(rows * qw, 4);
  std::vector<float> fused(static_cast<std::size_t>(rows * width));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::copy_n(&q[r * qw], qw, &fused[r * width]);
    std::copy_n(&k[r * kw], kw, &fused[r * width + qw]);
    std::copy_n(&v[r * kw], kw, &fused[r * width + qw + kw]);
  }
  rope_forward(q.data(), 2, 40, 4, 8, 10000.0);
  rope_forward(fused.data(), 2, 40, 4, 8, 10000.0, 0, width);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < qw; ++c) ASSERT_EQ(fused[r * width + c], q[r * qw + c]);
  }
  std::vector<float> out(q.size()), lse(2 * 4 * 40), dq(q.size()), dk(k.size()), dv(v.size());
  attention_forward(packed, q.data(), k.data(), v.data(), out.data(), lse.data());
  attention_backward(packed, q.data(), k.data(), v.data(), out.data(), g.data(), lse.data(),
                     dq.data(), dk.data(), dv.data());
  AttentionShape strided = packed;
  strided.q_stride = strided.kv_stride = width;
  float* fq = fused.data();
  std::vector<float> out2(q.size()), lse2(lse.size()), dfused(fused.size(), 7.0f);
  attention_forward(strided, fq, fq + qw, fq + qw + kw, out2.data(), lse2.data());
  attention_backward(strided, fq, fq + qw, fq + qw + kw, out2.data(), g.data(), lse2.data(),
                     dfused.data(), dfused.data() + qw, dfused.data() + qw + kw);
  EXPECT_EQ(out, out2);
  EXPECT_EQ(lse, lse2);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < qw; ++c) ASSERT_EQ(dfused[r * width + c], dq[r * qw + c]);
    for (std::int64_t c = 0; c < kw; ++c) ASSERT_EQ(dfused[r * width + qw + c], dk[r * kw + c]);
    for (std::int64_t c = 0; c < kw; ++c)
      ASSERT_EQ(dfused[r * width + qw + kw + c], dv[r * kw + c]);
  }
}

}  // namespace
}  // namespace weft::kernels
