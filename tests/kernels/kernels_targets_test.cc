// The element-wise kernels give the same bits on every SIMD target (docs/TRAINING.md): their
// sums go into 16 fixed lanes whatever the vector width, nothing is fused, and exp is weft's
// own. The products (OpenBLAS's, attention's tiles, which fuse multiply-adds where the target
// has FMA) are not in this claim; the tests against plain loops and PyTorch bound them.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/random.h"
#include "weft/base/error.h"
#include "weft/base/simd.h"
#include "weft/kernels/elementwise.h"
#include "weft/kernels/internal/softmax_rows.h"
#include "weft/kernels/loss.h"
#include "weft/kernels/rmsnorm.h"
#include "weft/kernels/rope.h"
#include "weft/kernels/swiglu.h"

namespace weft::kernels {
namespace {

using weft::testing::random_floats;

// Every element-wise kernel once, at sizes with whole vectors of every width and a rest.
std::vector<std::vector<float>> run_all() {
  const std::int64_t rows = 37, dim = 72;  // 72 = 4 x 16 + 8
  const auto n = static_cast<std::size_t>(rows * dim);
  const auto x = random_floats(n, 1), w = random_floats(dim, 2), dy = random_floats(n, 3);
  std::vector<float> y(n), rstd(rows), dx(n), dw(dim, 0.0f);
  rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, dim, 1e-5);
  rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), rows, dim);
  auto a = random_floats(n, 4), b = random_floats(n, 5);
  std::vector<float> h(n);
  swiglu_forward(a.data(), b.data(), h.data(), static_cast<std::int64_t>(n));
  swiglu_backward(dy.data(), a.data(), b.data(), static_cast<std::int64_t>(n));
  std::vector<std::int32_t> targets(rows);
  for (std::int64_t i = 0; i < rows; ++i)
    targets[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % dim);
  std::vector<float> losses(rows), dlogits(n);
  cross_entropy_forward(x.data(), targets.data(), rows, dim, losses.data());
  cross_entropy_backward(x.data(), targets.data(), rows, dim, 0.5, dlogits.data());
  auto rotated = x;  // (1, rows, 1, dim)
  rope_forward(rotated.data(), 1, rows, 1, dim, 10000.0, 0, dim);
  auto soft = x;
  std::vector<float> m(rows, -1e30f), l(rows, 0.0f), correction(rows);
  internal::softmax_block(soft.data(), dim, rows, dim, m.data(), l.data(), correction.data());
  const double squares = sum_squares(x.data(), static_cast<std::int64_t>(n));
  auto added = x;  // rows of 40 of 72, strided
  add_rows(added.data(), dim, dy.data() + 3, dim, rows, 40);
  return {y,
          added,
          rstd,
          dx,
          dw,
          h,
          a,
          b,
          losses,
          dlogits,
          rotated,
          soft,
          l,
          {static_cast<float>(squares), static_cast<float>(squares - static_cast<float>(squares))}};
}

TEST(KernelTargetsTest, ElementWiseKernelsGiveTheSameBitsOnEveryTarget) {
  const std::vector<std::string> targets = simd::supported_targets();
  ASSERT_FALSE(targets.empty());
  std::vector<std::vector<float>> first;
  {
    simd::ScopedTarget on(targets.front());
    first = run_all();
  }
  for (std::size_t t = 1; t < targets.size(); ++t) {
    simd::ScopedTarget on(targets[t]);
    const auto got = run_all();
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], first[i]) << "output " << i << " on " << targets[t] << " against "
                                  << targets.front();
  }
}

TEST(KernelTargetsTest, UseTargetSelectsAndRejects) {
  const std::vector<std::string> targets = simd::supported_targets();
  for (const std::string& t : targets) {
    simd::ScopedTarget on(t);
    EXPECT_EQ(simd::current_target(), t);
  }
  EXPECT_EQ(simd::current_target(), targets.front());
  EXPECT_THROW(simd::use_target("NO_SUCH_TARGET"), InvalidArgument);
  EXPECT_EQ(simd::current_target(), targets.front());
}

}  // namespace
}  // namespace weft::kernels
