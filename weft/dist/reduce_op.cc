// One source for every vector target (Highway's foreach_target re-includes it per target):
// the loops below are plain C++, compiled with each target's instructions (HWY_BEFORE_NAMESPACE
// sets them) and vectorised by the compiler; the loops are memory bound, but the wider forms
// halve the instructions when the data sits in cache.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weft/dist/reduce_op.cc"
#include "weft/dist/reduce_op.h"

#include <algorithm>
#include <functional>
#include <type_traits>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "weft/base/check.h"

HWY_BEFORE_NAMESPACE();
namespace weft::dist::HWY_NAMESPACE {
namespace {

// One loop per (type, op) so that the compiler vectorises each; the switch is outside.
// out[i] = f(a[i], b[i]); out may be a or b (reduce_into passes a == out).
template <class T, class F>
void apply(T* out, const T* a, const T* b, std::size_t count, F f) {
  for (std::size_t i = 0; i < count; ++i) out[i] = f(a[i], b[i]);
}

// Integer sums and products wrap around (two's complement) instead of overflowing, which is
// undefined for signed types: computed in the unsigned type of the same width.
template <class T, class Op>
T wrap(T a, T b, Op op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<decltype(a + b)>;
    return static_cast<T>(op(static_cast<U>(a), static_cast<U>(b)));
  } else {
    return static_cast<T>(op(a, b));
  }
}

template <class T>
void reduce_typed(T* acc, const T* acc_in, const T* in, std::size_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return apply(acc, acc_in, in, count, [](T a, T b) { return wrap(a, b, std::plus<>()); });
    case ReduceOp::kProduct:
      return apply(acc, acc_in, in, count,
                   [](T a, T b) { return wrap(a, b, std::multiplies<>()); });
    case ReduceOp::kMin:
      return apply(acc, acc_in, in, count, [](T a, T b) { return std::min(a, b); });
    case ReduceOp::kMax:
      return apply(acc, acc_in, in, count, [](T a, T b) { return std::max(a, b); });
    case ReduceOp::kBAnd:
    case ReduceOp::kBOr:
    case ReduceOp::kBXor:
      if constexpr (std::is_integral_v<T>) {
        if (op == ReduceOp::kBAnd) {
          return apply(acc, acc_in, in, count, [](T a, T b) { return static_cast<T>(a & b); });
        }
        if (op == ReduceOp::kBOr) {
          return apply(acc, acc_in, in, count, [](T a, T b) { return static_cast<T>(a | b); });
        }
        return apply(acc, acc_in, in, count, [](T a, T b) { return static_cast<T>(a ^ b); });
      }
      break;
  }
  WEFT_CHECK(false && "bitwise reduction of a floating-point type");
}

}  // namespace

void ReducePair(void* out, const void* a, const void* b, std::size_t count, DType dtype,
                ReduceOp op) {
  switch (dtype) {
    case DType::kFloat32:
      return reduce_typed(static_cast<float*>(out), static_cast<const float*>(a),
                          static_cast<const float*>(b), count, op);
    case DType::kFloat64:
      return reduce_typed(static_cast<double*>(out), static_cast<const double*>(a),
                          static_cast<const double*>(b), count, op);
    case DType::kInt8:
      return reduce_typed(static_cast<std::int8_t*>(out), static_cast<const std::int8_t*>(a),
                          static_cast<const std::int8_t*>(b), count, op);
    case DType::kUInt8:
      return reduce_typed(static_cast<std::uint8_t*>(out), static_cast<const std::uint8_t*>(a),
                          static_cast<const std::uint8_t*>(b), count, op);
    case DType::kInt32:
      return reduce_typed(static_cast<std::int32_t*>(out), static_cast<const std::int32_t*>(a),
                          static_cast<const std::int32_t*>(b), count, op);
    case DType::kInt64:
      return reduce_typed(static_cast<std::int64_t*>(out), static_cast<const std::int64_t*>(a),
                          static_cast<const std::int64_t*>(b), count, op);
    case DType::kFloat16:
    case DType::kBFloat16:
      break;
  }
  WEFT_CHECK(false && "16-bit floats are widened to float32 before reducing");
}

}  // namespace weft::dist::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace weft::dist {
namespace {

template <class T>
void divide(T* acc, std::size_t count, std::size_t n) {
  for (std::size_t i = 0; i < count; ++i) acc[i] = static_cast<T>(acc[i] / static_cast<T>(n));
}

// 16-bit floats divide in float32 and round once (for engines that reduce them natively).
template <class H>
void divide_16bit(H* acc, std::size_t count, std::size_t n) {
  for (std::size_t i = 0; i < count; ++i) {
    acc[i] = H(static_cast<float>(acc[i]) / static_cast<float>(n));
  }
}

}  // namespace

HWY_EXPORT(ReducePair);

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kBAnd:
      return "band";
    case ReduceOp::kBOr:
      return "bor";
    case ReduceOp::kBXor:
      return "bxor";
  }
  return "unknown";
}

bool is_bitwise(ReduceOp op) {
  return op == ReduceOp::kBAnd || op == ReduceOp::kBOr || op == ReduceOp::kBXor;
}

void reduce_into(void* acc, const void* in, std::size_t count, DType dtype, ReduceOp op) {
  reduce_pair(acc, acc, in, count, dtype, op);
}

void reduce_pair(void* out, const void* a, const void* b, std::size_t count, DType dtype,
                 ReduceOp op) {
  HWY_DYNAMIC_DISPATCH(ReducePair)(out, a, b, count, dtype, op);
}

void finish_average(void* acc, std::size_t count, DType dtype, std::size_t n) {
  switch (dtype) {
    case DType::kFloat32:
      return divide(static_cast<float*>(acc), count, n);
    case DType::kFloat64:
      return divide(static_cast<double*>(acc), count, n);
    case DType::kInt8:
      return divide(static_cast<std::int8_t*>(acc), count, n);
    case DType::kUInt8:
      return divide(static_cast<std::uint8_t*>(acc), count, n);
    case DType::kInt32:
      return divide(static_cast<std::int32_t*>(acc), count, n);
    case DType::kInt64:
      return divide(static_cast<std::int64_t*>(acc), count, n);
    case DType::kFloat16:
      return divide_16bit(static_cast<Half*>(acc), count, n);
    case DType::kBFloat16:
      return divide_16bit(static_cast<BFloat16*>(acc), count, n);
  }
}

}  // namespace weft::dist
#endif  // HWY_ONCE
