// The kernels split over threads give the single-threaded results bitwise: every element is
// computed by one thread, in the same order (Linear's dW splits its rows, not the sum).
// Labelled race: make test runs it again under ThreadSanitizer.
#include <gtest/gtest.h>

#include <vector>

#include "tests/support/random.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/elementwise.h"
#include "weft/kernels/loss.h"
#include "weft/kernels/matmul.h"
#include "weft/kernels/parallel.h"
#include "weft/kernels/rmsnorm.h"
#include "weft/kernels/swiglu.h"

namespace weft::kernels {
namespace {

using weft::testing::random_floats;

struct Outputs {
  std::vector<float> att, lse, dq, dk, dv, y, rstd, dx, dw, lin, ldx, ldw, h, losses;
};

Outputs run_all(int threads) {
  set_threads(threads);
  const AttentionShape s{2, 70, 4, 2, 16};
  const auto nq = static_cast<std::size_t>(2 * 70 * 4 * 16), nkv = nq / 2;
  Outputs o;
  const auto q = random_floats(nq, 1), k = random_floats(nkv, 2), v = random_floats(nkv, 3),
             g = random_floats(nq, 4);
  o.att.resize(nq), o.lse.resize(2 * 4 * 70), o.dq.resize(nq), o.dk.resize(nkv), o.dv.resize(nkv);
  attention_forward(s, q.data(), k.data(), v.data(), o.att.data(), o.lse.data());
  attention_backward(s, q.data(), k.data(), v.data(), o.att.data(), g.data(), o.lse.data(),
                     o.dq.data(), o.dk.data(), o.dv.data());
  const std::int64_t rows = 1100, dim = 32;  // three blocks of Linear's rows (matmul.cc)
  const auto x = random_floats(rows * dim, 5), w = random_floats(dim, 6),
             dy = random_floats(rows * dim, 7);
  o.y.resize(x.size()), o.rstd.resize(rows), o.dx.resize(x.size()), o.dw.assign(dim, 0.0f);
  rmsnorm_forward(x.data(), w.data(), o.y.data(), o.rstd.data(), rows, dim, 1e-5);
  rmsnorm_backward(dy.data(), x.data(), w.data(), o.rstd.data(), o.dx.data(), o.dw.data(), rows,
                   dim);
  // 1600 output features: dW is split between the threads too, in blocks of 512 rows, the
  // last one short.
  const std::int64_t out = 1600;
  const auto lw = random_floats(out * dim, 8), ly = random_floats(rows * out, 9);
  o.lin.resize(rows * out), o.ldx.assign(x.size(), 0.5f), o.ldw.assign(lw.size(), 0.0f);
  linear_forward(x.data(), lw.data(), o.lin.data(), rows, dim, out);
  linear_backward(ly.data(), x.data(), lw.data(), o.ldx.data(), o.ldw.data(), rows, dim, out,
                  /*accumulate_dx=*/true);
  const auto a = random_floats(40000, 10), b = random_floats(40000, 11);
  o.h.resize(a.size());
  swiglu_forward(a.data(), b.data(), o.h.data(), 40000);
  std::vector<std::int32_t> targets(rows);
  for (std::int64_t i = 0; i < rows; ++i)
    targets[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % dim);
  o.losses.resize(rows);
  cross_entropy_forward(x.data(), targets.data(), rows, dim, o.losses.data());
  set_threads(1);
  return o;
}

TEST(KernelThreadsTest, SumOfSquaresDoesNotDependOnTheThreads) {
  const auto x = random_floats(300'001, 12);
  set_threads(1);
  const double one = sum_squares(x.data(), static_cast<std::int64_t>(x.size()));
  set_threads(2);
  const double two = sum_squares(x.data(), static_cast<std::int64_t>(x.size()));
  set_threads(1);
  EXPECT_EQ(one, two);
}

TEST(KernelThreadsTest, TwoThreadsGiveTheSingleThreadedResults) {
  const Outputs one = run_all(1), two = run_all(2);
  EXPECT_EQ(one.att, two.att);
  EXPECT_EQ(one.lse, two.lse);
  EXPECT_EQ(one.dq, two.dq);
  EXPECT_EQ(one.dk, two.dk);
  EXPECT_EQ(one.dv, two.dv);
  EXPECT_EQ(one.y, two.y);
  EXPECT_EQ(one.dx, two.dx);
  EXPECT_EQ(one.dw, two.dw);
  EXPECT_EQ(one.lin, two.lin);
  EXPECT_EQ(one.ldx, two.ldx);
  EXPECT_EQ(one.h, two.h);
  EXPECT_EQ(one.losses, two.losses);
  EXPECT_EQ(one.ldw, two.ldw);
}

}  // namespace
}  // namespace weft::kernels
