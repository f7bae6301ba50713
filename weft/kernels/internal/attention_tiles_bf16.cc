// One source for every vector target (Highway's foreach_target re-includes it per target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weft/kernels/internal/attention_tiles_bf16.cc"
#include "weft/kernels/internal/attention_tiles_bf16.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "weft/kernels/internal/attention_tiles.h"
#include "weft/kernels/internal/bf16-inl.h"
#include "weft/kernels/internal/tile_loops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace weft::kernels::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

using Tag = hn::CappedTag<float, 16>;  // at most 64 bytes: two vectors divide a panel
using Words = hn::RebindToUnsigned<Tag>;
using V = hn::Vec<Tag>;
using W = hn::Vec<Words>;

// A word's halves as float32: the high one (added first) and the low one.
inline float high_half(std::uint32_t word) {
  word &= 0xffff0000u;
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}
inline float low_half(std::uint32_t word) { return high_half(word << 16); }

// acc += a's high half * b's, then a's low half * b's, lane by lane, in two roundings: the
// products are exact, so a multiply and an add give the bits a fused multiply-add gives.
struct TwoMultiplyAdds {
  struct Right {
    V high, low;
  };
  struct Left {
    V high, low;
  };
  static Right right(const std::uint32_t* p) {
    const W w = hn::LoadU(Words(), p);
    return {hn::BitCast(Tag(), hn::And(w, hn::Set(Words(), 0xffff0000u))),
            hn::BitCast(Tag(), hn::ShiftLeft<16>(w))};
  }
  static Left left(std::uint32_t word) {
    return {hn::Set(Tag(), high_half(word)), hn::Set(Tag(), low_half(word))};
  }
  static V step(V acc, const Left& a, const Right& b) {
    return hn::MulAdd(a.low, b.low, hn::MulAdd(a.high, b.high, acc));
  }
};

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// The same sum in one instruction. Highway 1.0.3 has no operation for it, and the compiler
// would need AVX512_BF16 enabled for the whole source to emit it: the assembler's mnemonic
// instead, run only where bf16_dot_instruction() says the CPU has it.
struct Vdpbf16ps {
  using Right = W;
  using Left = W;
  static Right right(const std::uint32_t* p) { return hn::LoadU(Words(), p); }
  static Left left(std::uint32_t word) { return hn::Set(Words(), word); }
  static V step(V acc, Left a, Right b) {
    asm("vdpbf16ps %2, %1, %0" : "+v"(acc.raw) : "v"(a.raw), "v"(b.raw));
    return acc;
  }
};
constexpr bool kHasInstruction = true;
#else
using Vdpbf16ps = TwoMultiplyAdds;
constexpr bool kHasInstruction = false;
#endif

// The products other than scores: 4 rows by 4 vectors of d with 32 registers, by 2 with 16
// (the emulation holds both halves of each right-hand vector).
constexpr int kMaxVectors = kRegisters == 32 ? 4 : 2;

std::int64_t lanes() { return static_cast<std::int64_t>(hn::Lanes(Tag())); }

// One word's contribution in scalars, in the same order.
inline float scalar_step(float acc, std::uint32_t a, std::uint32_t b) {
  acc += high_half(a) * high_half(b);
  return acc + low_half(a) * low_half(b);
}

template <class Dot, int R>
HWY_INLINE void scores_block(const std::uint32_t* a, std::int64_t lda, const std::uint32_t* bt,
                             std::int64_t ldbt, std::int64_t r0, std::int64_t end,
                             std::int64_t words, float scale, float* s, std::int64_t ld_s) {
  const Tag dt;
  const std::int64_t w = lanes();
  for (std::int64_t c = 0; c < end; c += 2 * w) {
    V acc[R][2];
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = hn::Zero(dt);
    for (std::int64_t x = 0; x < words; ++x) {
      const auto b0 = Dot::right(bt + x * ldbt + c), b1 = Dot::right(bt + x * ldbt + c + w);
      for (int i = 0; i < R; ++i) {
        const auto av = Dot::left(a[(r0 + i) * lda + x]);
        acc[i][0] = Dot::step(acc[i][0], av, b0);
        acc[i][1] = Dot::step(acc[i][1], av, b1);
      }
    }
    const V sv = hn::Set(dt, scale);
    for (int i = 0; i < R; ++i) {
      hn::StoreU(hn::Mul(acc[i][0], sv), dt, s + (r0 + i) * ld_s + c);
      hn::StoreU(hn::Mul(acc[i][1], sv), dt, s + (r0 + i) * ld_s + c + w);
    }
  }
}

// o[i0 + i][x0, x0 + NV vectors) = (+=) sum over words j in [begin, end) of a[i0 + i][j] *
// b[j][...].
template <class Dot, int R, int NV>
HWY_INLINE void pairs_block(const std::uint32_t* a, std::int64_t lda, const std::uint32_t* b,
                            std::int64_t ldb, std::int64_t i0, std::int64_t begin, std::int64_t end,
                            std::int64_t x0, bool accumulate, float* o, std::int64_t ldo) {
  const Tag dt;
  const std::int64_t w = lanes();
  V acc[R][NV];
  for (int i = 0; i < R; ++i)
    for (int q = 0; q < NV; ++q) acc[i][q] = hn::Zero(dt);
  for (std::int64_t j = begin; j < end; ++j) {
    decltype(Dot::right(b)) bj[NV];
    for (int q = 0; q < NV; ++q) bj[q] = Dot::right(b + j * ldb + x0 + q * w);
    for (int i = 0; i < R; ++i) {
      const auto av = Dot::left(a[(i0 + i) * lda + j]);
      for (int q = 0; q < NV; ++q) acc[i][q] = Dot::step(acc[i][q], av, bj[q]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int q = 0; q < NV; ++q) {
      float* out = o + (i0 + i) * ldo + x0 + q * w;
      hn::StoreU(accumulate ? hn::Add(acc[i][q], hn::LoadU(dt, out)) : acc[i][q], dt, out);
    }
  }
}

// The product of a's words [rows][...] and b's [...][d], row block by row block, each over
// its words [range(i).first, range(i).second) for a block starting at row i: vectors, then
// the last d % lanes columns in scalars.
template <class Dot, class Range>
void pairs_product(const std::uint32_t* a, std::int64_t lda, const std::uint32_t* b,
                   std::int64_t ldb, std::int64_t rows, std::int64_t d, Range range,
                   bool accumulate, float* o, std::int64_t ldo) {
  over_row_blocks<kRows>(0, rows, [&]<int R>(std::int64_t i) HWY_ATTR {
    const std::pair<std::int64_t, std::int64_t> words = range(i, R);
    over_vectors<kMaxVectors>(d, lanes(), [&]<int NV>(std::int64_t x0) HWY_ATTR {
      pairs_block<Dot, R, NV>(a, lda, b, ldb, i, words.first, words.second, x0, accumulate, o, ldo);
    });
  });
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::pair<std::int64_t, std::int64_t> words = range(i, 1);
    for (std::int64_t x = d - d % lanes(); x < d; ++x) {
      float sum = 0;
      for (std::int64_t j = words.first; j < words.second; ++j)
        sum = scalar_step(sum, a[i * lda + j], b[j * ldb + x]);
      o[i * ldo + x] = accumulate ? o[i * ldo + x] + sum : sum;
    }
  }
}

template <class Dot>
void scores_tile(const std::uint32_t* a, std::int64_t lda, const std::uint32_t* bt,
                 std::int64_t ldbt, std::int64_t rows, std::int64_t cols, std::int64_t d,
                 std::int64_t diagonal, float scale, float* s, std::int64_t ld_s) {
  over_row_blocks<kScoreRows>(0, rows, [&]<int R>(std::int64_t r) HWY_ATTR {
    scores_block<Dot, R>(a, lda, bt, ldbt, r, visible_end(r + R - 1, diagonal, cols), d / 2, scale,
                         s, ld_s);
  });
}

template <class Dot>
void rows_times_tile(const std::uint32_t* p, std::int64_t ldp, const std::uint32_t* v,
                     std::int64_t ldv, std::int64_t rows, std::int64_t cols, std::int64_t d,
                     std::int64_t diagonal, bool accumulate, float* o, std::int64_t ldo) {
  // A block of rows reads the words up to its last row's visible end.
  auto range = [&](std::int64_t i, int r) {
    return std::pair<std::int64_t, std::int64_t>(0,
                                                 (visible_end(i + r - 1, diagonal, cols) + 1) / 2);
  };
  pairs_product<Dot>(p, ldp, v, ldv, rows, d, range, accumulate, o, ldo);
}

template <class Dot>
void transposed_times_rows(const std::uint32_t* pt, std::int64_t ldpt, const std::uint32_t* b,
                           std::int64_t ldb, std::int64_t rows, std::int64_t cols, std::int64_t d,
                           std::int64_t diagonal, bool accumulate, float* o, std::int64_t ldo) {
  // Row r sees column k when r >= k - diagonal: a block of columns starts at its first's word.
  auto range = [&](std::int64_t k, int) {
    return std::pair<std::int64_t, std::int64_t>(
        std::clamp<std::int64_t>(k - diagonal, 0, rows) / 2, (rows + 1) / 2);
  };
  pairs_product<Dot>(pt, ldpt, b, ldb, cols, d, range, accumulate, o, ldo);
}

const std::uint32_t* as_words(const BFloat16* p) {
  return reinterpret_cast<const std::uint32_t*>(p);
}

}  // namespace

bool HasInstruction() { return kHasInstruction; }

// words[j][c] pairs src[2j][c] and src[2j + 1][c] rounded: round_transposed_pairs' first half.
void RoundRowPairs(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                   std::uint32_t* dst, std::int64_t ld_dst) {
  const Tag dt;
  const std::int64_t w = lanes();
  for (std::int64_t j = 0; 2 * j < rows; ++j) {
    const float* even = src + 2 * j * ld;
    const float* odd = 2 * j + 1 < rows ? even + ld : nullptr;
    std::uint32_t* out = dst + j * ld_dst;
    std::int64_t c = 0;
    for (; c + w <= cols; c += w) {
      const W low = BF16Bits(dt, hn::LoadU(dt, even + c));
      const W high = odd != nullptr ? BF16Bits(dt, hn::LoadU(dt, odd + c)) : hn::Zero(Words());
      hn::StoreU(hn::Or(low, hn::ShiftLeft<16>(high)), Words(), out + c);
    }
    for (; c < cols; ++c) {
      const std::uint32_t high = odd != nullptr ? BFloat16(odd[c]).bits : 0u;
      out[c] = BFloat16(even[c]).bits | high << 16;
    }
  }
}

#define WEFT_BF16_TILE(Name, name)                                                              \
  void Name(const std::uint32_t* a, std::int64_t lda, const std::uint32_t* b, std::int64_t ldb, \
            std::int64_t rows, std::int64_t cols, std::int64_t d, std::int64_t diagonal,        \
            bool accumulate, float* o, std::int64_t ldo, bool instruction) {                    \
    if (kHasInstruction && instruction) {                                                       \
      name<Vdpbf16ps>(a, lda, b, ldb, rows, cols, d, diagonal, accumulate, o, ldo);             \
    } else {                                                                                    \
      name<TwoMultiplyAdds>(a, lda, b, ldb, rows, cols, d, diagonal, accumulate, o, ldo);       \
    }                                                                                           \
  }
WEFT_BF16_TILE(RowsTimesTileBF16, rows_times_tile)
WEFT_BF16_TILE(TransposedTimesRowsBF16, transposed_times_rows)
#undef WEFT_BF16_TILE

void ScoresTileBF16(const BFloat16* a, std::int64_t lda, const std::uint32_t* bt, std::int64_t ldbt,
                    std::int64_t rows, std::int64_t cols, std::int64_t d, std::int64_t diagonal,
                    float scale, float* s, std::int64_t ld_s, bool instruction) {
  if (kHasInstruction && instruction) {
    scores_tile<Vdpbf16ps>(as_words(a), lda / 2, bt, ldbt, rows, cols, d, diagonal, scale, s, ld_s);
  } else {
    scores_tile<TwoMultiplyAdds>(as_words(a), lda / 2, bt, ldbt, rows, cols, d, diagonal, scale, s,
                                 ld_s);
  }
}

}  // namespace weft::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <vector>

#include "weft/base/check.h"
#include "weft/base/simd.h"
#include "weft/kernels/convert.h"

namespace weft::kernels::internal {

HWY_EXPORT(HasInstruction);
HWY_EXPORT(RoundRowPairs);
HWY_EXPORT(ScoresTileBF16);
HWY_EXPORT(RowsTimesTileBF16);
HWY_EXPORT(TransposedTimesRowsBF16);

namespace {

// CPUID leaf 7, sub-leaf 1: EAX bit 5 is AVX512_BF16 (the OS's saving of AVX-512 state is
// what Highway checked before it picked an AVX-512 target).
bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
#else
  return false;
#endif
}

}  // namespace

bool bf16_dot_instruction() {
  static const bool cpu = cpu_has_avx512_bf16();
  return cpu && HWY_DYNAMIC_DISPATCH(HasInstruction)();
}

// Scalar: the compiler interleaves the rows well enough for a pack made once per head.
void pack_row_pairs(const BFloat16* src, std::int64_t ld, std::int64_t n, std::int64_t d,
                    std::uint32_t* dst, std::int64_t ld_dst) {
  for (std::int64_t j = 0; 2 * j < n; ++j) {
    const BFloat16* even = src + 2 * j * ld;
    const BFloat16* odd = 2 * j + 1 < n ? even + ld : nullptr;
    std::uint32_t* out = dst + j * ld_dst;
    for (std::int64_t x = 0; x < d; ++x)
      out[x] = even[x].bits | (odd != nullptr ? std::uint32_t{odd[x].bits} << 16 : 0u);
  }
}

// The pairs are float-sized: the float transpose moves them (as bits: loads, shuffles and
// stores never change a value's bits).
void pack_transposed_pairs(const BFloat16* src, std::int64_t ld, std::int64_t n, std::int64_t d,
                           std::uint32_t* dst, std::int64_t ld_dst) {
  WEFT_CHECK(d % 2 == 0 && ld % 2 == 0);
  pack_transposed(reinterpret_cast<const float*>(src), ld / 2, n, d / 2,
                  reinterpret_cast<float*>(dst), ld_dst);
}

void round_rows(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                BFloat16* dst, std::int64_t ld_dst) {
  for (std::int64_t r = 0; r < rows; ++r) {
    to_bfloat16(src + r * ld, dst + r * ld_dst, cols);
    if (cols % 2 != 0) dst[r * ld_dst + cols] = BFloat16();  // the last word's partner
  }
}

// Rounded in pairs of rows, then the words transposed (in a thread's own buffer: the kernels'
// threads call it at once). Rounding straight into the transposed layout, a word at a time,
// took 5 % of a step of configs/llama_512.toml.
void round_transposed_pairs(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                            std::uint32_t* dst, std::int64_t ld_dst) {
  thread_local std::vector<std::uint32_t> pairs;
  pairs.resize(static_cast<std::size_t>((rows + 1) / 2 * cols));
  HWY_DYNAMIC_DISPATCH(RoundRowPairs)(src, ld, rows, cols, pairs.data(), cols);
  pack_transposed(reinterpret_cast<const float*>(pairs.data()), cols, (rows + 1) / 2, cols,
                  reinterpret_cast<float*>(dst), ld_dst);
}

void scores_tile_bf16(const BFloat16* a, std::int64_t lda, const std::uint32_t* bt,
                      std::int64_t ldbt, std::int64_t rows, std::int64_t cols, std::int64_t d,
                      std::int64_t diagonal, float scale, float* s, std::int64_t ld_s) {
  WEFT_CHECK(d % 2 == 0 && lda % 2 == 0);
  HWY_DYNAMIC_DISPATCH(ScoresTileBF16)
  (a, lda, bt, ldbt, rows, cols, d, diagonal, scale, s, ld_s, bf16_dot_instruction());
}

void rows_times_tile_bf16(const std::uint32_t* p, std::int64_t ldp, const std::uint32_t* v,
                          std::int64_t ldv, std::int64_t rows, std::int64_t cols, std::int64_t d,
                          std::int64_t diagonal, bool accumulate, float* o, std::int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(RowsTimesTileBF16)
  (p, ldp, v, ldv, rows, cols, d, diagonal, accumulate, o, ldo, bf16_dot_instruction());
}

void tile_transposed_times_rows_bf16(const std::uint32_t* pt, std::int64_t ldpt,
                                     const std::uint32_t* b, std::int64_t ldb, std::int64_t rows,
                                     std::int64_t cols, std::int64_t d, std::int64_t diagonal,
                                     bool accumulate, float* o, std::int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(TransposedTimesRowsBF16)
  (pt, ldpt, b, ldb, rows, cols, d, diagonal, accumulate, o, ldo, bf16_dot_instruction());
}

}  // namespace weft::kernels::internal
#endif  // HWY_ONCE
