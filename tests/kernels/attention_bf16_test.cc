// Attention in mixed precision (bfloat16 q, k, v; kernels/attention.h) against the plain
// definition in float64 on the same bfloat16 inputs, on every SIMD target, and the same bits
// on every target (AVX512_BF16's dot product where the CPU has it, two multiply-adds
// elsewhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/support/simd_targets.h"
#include "weft/base/dtype.h"
#include "weft/base/simd.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/internal/attention_tiles_bf16.h"

namespace weft::kernels {
namespace {

class AttentionBF16Test : public weft::testing::OnEveryTarget {};
WEFT_ON_EVERY_TARGET(AttentionBF16Test);

using Vec = std::vector<double>;

std::size_t size(std::int64_t n) { return static_cast<std::size_t>(n); }

// Random bfloat16 values and the same values in float64.
struct Inputs {
  std::vector<BFloat16> bf16;
  Vec exact;
  Inputs(std::int64_t n, unsigned seed, double scale) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> dist(0.0f, static_cast<float>(scale));
    for (std::int64_t i = 0; i < n; ++i) {
      bf16.emplace_back(dist(gen));
      exact.push_back(static_cast<float>(bf16.back()));
    }
  }
};

// The whole definition per query row (packed layouts, kv_seq keys, causal offset): softmax
// over the visible keys, the weighted sum of values, and the gradients for dout.
struct Reference {
  Vec out, dq, dk, dv;
  Reference(const AttentionShape& s, const Vec& q, const Vec& k, const Vec& v, const Vec& dout)
      : out(q.size()), dq(q.size()), dk(k.size()), dv(v.size()) {
    const std::int64_t d = s.head_dim, group = s.heads / s.kv_heads;
    const double scale = 1 / std::sqrt(static_cast<double>(d));
    auto qa = [&](std::int64_t b, std::int64_t i, std::int64_t h) {
      return size(((b * s.seq + i) * s.heads + h) * d);
    };
    auto ka = [&](std::int64_t b, std::int64_t j, std::int64_t h) {
      return size(((b * s.kv_seq + j) * s.kv_heads + h / group) * d);
    };
    for (std::int64_t b = 0; b < s.batch; ++b) {
      for (std::int64_t h = 0; h < s.heads; ++h) {
        for (std::int64_t i = 0; i < s.seq; ++i) {
          const std::int64_t seen = std::min(s.kv_seq, i + s.causal_offset + 1);
          Vec p(size(seen)), dp(size(seen));
          double max = -1e300, sum = 0, mean = 0;
          for (std::int64_t j = 0; j < seen; ++j) {
            double e = 0;
            for (std::int64_t x = 0; x < d; ++x) e += q[qa(b, i, h) + x] * k[ka(b, j, h) + x];
            max = std::max(max, p[size(j)] = e * scale);
          }
          for (auto& e : p) sum += (e = std::exp(e - max));
          for (std::int64_t j = 0; j < seen; ++j) {
            p[size(j)] /= sum;
            for (std::int64_t x = 0; x < d; ++x) {
              out[qa(b, i, h) + x] += p[size(j)] * v[ka(b, j, h) + x];
              dv[ka(b, j, h) + x] += p[size(j)] * dout[qa(b, i, h) + x];
              dp[size(j)] += dout[qa(b, i, h) + x] * v[ka(b, j, h) + x];
            }
            mean += p[size(j)] * dp[size(j)];
          }
          for (std::int64_t j = 0; j < seen; ++j) {
            const double ds = p[size(j)] * (dp[size(j)] - mean) * scale;
            for (std::int64_t x = 0; x < d; ++x) {
              dq[qa(b, i, h) + x] += ds * k[ka(b, j, h) + x];
              dk[ka(b, j, h) + x] += ds * q[qa(b, i, h) + x];
            }
          }
        }
      }
    }
  }
};

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

Result run(const AttentionShape& s, const Inputs& q, const Inputs& k, const Inputs& v,
           const Inputs& dout) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // The gradients start as NaN: the backward overwrites them, it does not add to them.
  Result r{std::vector<float>(q.exact.size()), std::vector<float>(size(s.batch * s.heads * s.seq)),
           std::vector<float>(q.exact.size(), nan), std::vector<float>(k.exact.size(), nan),
           std::vector<float>(v.exact.size(), nan)};
  attention_forward(s, q.bf16.data(), k.bf16.data(), v.bf16.data(), r.out.data(), r.lse.data());
  const std::vector<float> g(dout.exact.begin(), dout.exact.end());
  const std::vector<BFloat16> out(r.out.begin(), r.out.end());  // rounded, as the model keeps it
  attention_backward(s, q.bf16.data(), k.bf16.data(), v.bf16.data(), out.data(), g.data(),
                     r.lse.data(), r.dq.data(), r.dk.data(), r.dv.data());
  return r;
}

// The shapes: longer than a block of keys (300), odd lengths, head sizes of whole vectors of
// every width (64, 80), with a rest (20) and of scalars only (4), grouped heads, and a block of
// a longer sequence as ring attention runs it (kv_seq and an odd causal offset).
std::vector<AttentionShape> shapes() {
  return {{1, 300, 2, 1, 64},
          {2, 70, 4, 2, 20},
          {1, 33, 2, 2, 4},
          {1, 97, 2, 1, 80},
          {1, 1, 3, 1, 8},
          {1, 64, 2, 2, 16, 0, 0, 75, 11},
          {2, 50, 2, 1, 32, 0, 0, 50, 7}};
}

std::string name(const AttentionShape& s) {
  return "seq " + std::to_string(s.seq) + " head_dim " + std::to_string(s.head_dim) + " kv_seq " +
         std::to_string(s.kv_seq) + " offset " + std::to_string(s.causal_offset);
}

// Within `tolerance` of the largest magnitude of the reference.
void expect_close(const std::vector<float>& got, const Vec& want, double tolerance,
                  const std::string& what) {
  double largest = 0;
  for (double w : want) largest = std::max(largest, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tolerance * largest) << what << " at " << i;
}

// P and dS are rounded to bfloat16 (a relative error of at most 2^-9 each) before the products
// that read them, dout before its two, and the backward reads the output rounded: the results stay
// within 2^-7 of the largest magnitude of each (measured: out under 2^-9, dq, where dS cancels
// most, above 2^-8).
TEST_P(AttentionBF16Test, MatchesTheDefinitionOnTheSameBFloat16Inputs) {
  for (AttentionShape s : shapes()) {
    SCOPED_TRACE(name(s));
    if (s.kv_seq == 0) s.kv_seq = s.seq;
    const std::int64_t nq = s.batch * s.seq * s.heads * s.head_dim,
                       nkv = s.batch * s.kv_seq * s.kv_heads * s.head_dim;
    const Inputs q(nq, 1, 2.0), k(nkv, 2, 2.0), v(nkv, 3, 1.0), dout(nq, 4, 1.0);
    const Result got = run(s, q, k, v, dout);
    const Reference want(s, q.exact, k.exact, v.exact, dout.exact);
    const double tolerance = std::ldexp(1.0, -7);
    expect_close(got.out, want.out, tolerance, "out");
    expect_close(got.dq, want.dq, tolerance, "dq");
    expect_close(got.dk, want.dk, tolerance, "dk");
    expect_close(got.dv, want.dv, tolerance, "dv");
  }
}

// The same bits on every target: with the instruction (where the CPU has it) or two
// multiply-adds, in vectors of any width or in scalars.
TEST(AttentionBF16TargetsTest, GiveTheSameBitsOnEveryTarget) {
  for (AttentionShape s : shapes()) {
    SCOPED_TRACE(name(s));
    const std::int64_t kv_seq = s.kv_seq == 0 ? s.seq : s.kv_seq;
    const std::int64_t nq = s.batch * s.seq * s.heads * s.head_dim,
                       nkv = s.batch * kv_seq * s.kv_heads * s.head_dim;
    const Inputs q(nq, 5, 2.0), k(nkv, 6, 2.0), v(nkv, 7, 1.0), dout(nq, 8, 1.0);
    simd::use_target("");
    const Result first = run(s, q, k, v, dout);
    for (const std::string& target : simd::supported_targets()) {
      simd::ScopedTarget on(target);
      const Result got = run(s, q, k, v, dout);
      EXPECT_EQ(got.out, first.out) << target;
      EXPECT_EQ(got.lse, first.lse) << target;
      EXPECT_EQ(got.dq, first.dq) << target;
      EXPECT_EQ(got.dk, first.dk) << target;
      EXPECT_EQ(got.dv, first.dv) << target;
    }
  }
}

TEST(AttentionBF16TargetsTest, InstructionIsUsedOnlyOnAVX512) {
  const auto targets = simd::supported_targets();
  if (std::find(targets.begin(), targets.end(), "AVX2") == targets.end()) GTEST_SKIP() << "no AVX2";
  simd::ScopedTarget avx2("AVX2");
  EXPECT_FALSE(internal::bf16_dot_instruction());
}

}  // namespace
}  // namespace weft::kernels
