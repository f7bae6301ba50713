#include "bench_ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <type_traits>

#include "weft/base/check.h"

namespace weft::tools {
namespace {

using dist::Buffer;
using dist::Op;
using dist::ProcessGroup;
using dist::ReduceOp;

// Calls f.template operator()<T>() with T the C++ type of `dtype`.
template <class F>
decltype(auto) with_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f.template operator()<float>();
    case DType::kFloat64:
      return f.template operator()<double>();
    case DType::kFloat16:
      return f.template operator()<Half>();
    case DType::kBFloat16:
      return f.template operator()<BFloat16>();
    case DType::kInt8:
      return f.template operator()<std::int8_t>();
    case DType::kUInt8:
      return f.template operator()<std::uint8_t>();
    case DType::kInt32:
      return f.template operator()<std::int32_t>();
    case DType::kInt64:
      return f.template operator()<std::int64_t>();
  }
  return f.template operator()<float>();
}

template <class T>
constexpr bool kHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The value rank r contributes at element i: small integers, exact in every dtype.
int input(int r, std::size_t i) { return (r + static_cast<int>(i % 3)) % 3 + 1; }

template <class T>
T to(double x) {
  if constexpr (kHalf<T>) {
    return T(static_cast<float>(x));
  } else {
    return static_cast<T>(x);
  }
}

template <class T>
double from(T x) {
  if constexpr (kHalf<T>) {
    return static_cast<float>(x);
  } else {
    return static_cast<double>(x);
  }
}

// The reduction of every rank's input at i, with the arithmetic weft promises: integers wrap
// in their own type, 16-bit floats accumulate in float32.
template <class T>
T expected(ReduceOp op, int n, std::size_t i) {
  using Acc = std::conditional_t<kHalf<T>, float, T>;
  using W = std::conditional_t<std::is_integral_v<Acc>, std::uint64_t, Acc>;
  W acc = static_cast<W>(input(0, i));
  for (int r = 1; r < n; ++r) {
    const W v = static_cast<W>(input(r, i));
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc = static_cast<W>(static_cast<Acc>(acc + v));
        break;
      case ReduceOp::kProduct:
        acc = static_cast<W>(static_cast<Acc>(acc * v));
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kBAnd:
        if constexpr (std::is_integral_v<W>) acc &= v;
        break;
      case ReduceOp::kBOr:
        if constexpr (std::is_integral_v<W>) acc |= v;
        break;
      case ReduceOp::kBXor:
        if constexpr (std::is_integral_v<W>) acc ^= v;
        break;
    }
  }
  Acc result = static_cast<Acc>(acc);
  if (op == ReduceOp::kAvg) result = static_cast<Acc>(result / static_cast<Acc>(n));
  return to<T>(static_cast<double>(result));
}

// A buffer of a case: private memory, or a SharedBuffer (--shared).
class Bytes {
 public:
  void assign(std::size_t bytes, bool shared) {
    if (shared && bytes > 0) {
      shared_ = dist::SharedBuffer(bytes);
      span_ = {shared_.data(), bytes};
    } else {
      owned_.assign(bytes, std::byte{0});
      span_ = owned_;
    }
  }
  std::span<std::byte> span() const { return span_; }

 private:
  std::vector<std::byte> owned_;
  dist::SharedBuffer shared_;
  std::span<std::byte> span_;
};

// Buffers of one operation at one size, and how to run and check it.
struct Case {
  Bytes in, out;
  std::size_t count = 0;  // elements of the largest buffer
  int root = -1;
  double bus_factor = 1;
  std::function<void()> run;
  std::function<void()> fill;
  std::function<long()> wrong;
};

template <class T>
Buffer view(const Bytes& bytes) {
  return Buffer(bytes.span().data(), bytes.span().size() / sizeof(T), dtype_of<T>());
}

template <class T>
void fill_inputs(std::span<std::byte> bytes, int rank, std::size_t block) {
  T* p = reinterpret_cast<T*>(bytes.data());
  const std::size_t n = bytes.size() / sizeof(T);
  for (std::size_t i = 0; i < n; ++i) p[i] = to<T>(input(rank, block == 0 ? i : i % block));
}

template <class T>
long count_wrong(std::span<const std::byte> bytes, const std::function<T(std::size_t)>& want) {
  const T* p = reinterpret_cast<const T*>(bytes.data());
  long wrong = 0;
  for (std::size_t i = 0; i < bytes.size() / sizeof(T); ++i) wrong += from(p[i]) != from(want(i));
  return wrong;
}

// Fills `c` in place: its functions refer to its own buffers, so it must not move after.
template <class T>
void make_case(Case& c, ProcessGroup& pg, const BenchOptions& o, std::size_t bytes) {
  const int n = pg.size();
  const int r = pg.rank();
  const auto un = static_cast<std::size_t>(n);
  const ReduceOp op = o.redop;
  const std::optional<Op> kind = dist::op_from_name(o.op);
  WEFT_CHECK(kind || o.op == kSendRecv);  // weft-bench's command line takes only these
  const auto is = [&kind](Op x) { return kind == x; };
  std::size_t count = bytes / sizeof(T);
  const auto sized = [&](std::size_t in_elems, std::size_t out_elems) {
    c.in.assign(in_elems * sizeof(T), o.shared);
    c.out.assign(out_elems * sizeof(T), o.shared);
  };
  if (!kind || is(Op::all_reduce) || is(Op::broadcast) || is(Op::reduce)) {
    sized(count, kind ? 0 : count);
    c.fill = [&c, r] { fill_inputs<T>(c.in.span(), r, 0); };
  } else {
    count -= count % un;  // these split their buffer into n blocks
    const std::size_t block = count / un;
    if (is(Op::all_gather)) sized(block, count);
    if (is(Op::reduce_scatter)) sized(count, block);
    if (is(Op::all_to_all)) sized(count, count);
    c.fill = [&c, r, block, all_to_all = is(Op::all_to_all)] {
      fill_inputs<T>(c.in.span(), all_to_all ? r * 7 : r, block);
    };
  }
  c.count = count;
  if (is(Op::all_reduce)) {
    c.bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0;
    c.run = [&pg, &c, op] { pg.all_reduce(view<T>(c.in), op); };
    c.wrong = [&c, op, n] {
      return count_wrong<T>(c.in.span(), [&](std::size_t i) { return expected<T>(op, n, i); });
    };
  } else if (is(Op::reduce)) {
    c.root = 0;
    c.run = [&pg, &c, op] { pg.reduce(view<T>(c.in), 0, op); };
    c.wrong = [&c, op, n, r] {
      return r != 0 ? 0 : count_wrong<T>(c.in.span(), [&](std::size_t i) {
        return expected<T>(op, n, i);
      });
    };
  } else if (is(Op::broadcast)) {
    c.root = 0;
    c.run = [&pg, &c] { pg.broadcast(view<T>(c.in), 0); };
    c.wrong = [&c] {
      return count_wrong<T>(c.in.span(), [](std::size_t i) { return to<T>(input(0, i)); });
    };
  } else if (!kind) {
    c.run = [&pg, &c, n, r] {
      auto w = pg.send_async(view<T>(c.in), (r + 1) % n);
      pg.recv(view<T>(c.out), (r + n - 1) % n);
      w->wait();
    };
    c.wrong = [&c, n, r] {
      return count_wrong<T>(c.out.span(),
                            [&](std::size_t i) { return to<T>(input((r + n - 1) % n, i)); });
    };
  } else if (is(Op::all_gather)) {
    c.bus_factor = n > 1 ? 1.0 * (n - 1) / n : 0;
    c.run = [&pg, &c] { pg.all_gather(view<T>(c.out), view<T>(c.in)); };
    const std::size_t block = count / un;
    c.wrong = [&c, block] {
      return count_wrong<T>(c.out.span(), [&](std::size_t i) {
        return to<T>(input(static_cast<int>(i / block), i % block));
      });
    };
  } else if (is(Op::reduce_scatter)) {
    c.bus_factor = n > 1 ? 1.0 * (n - 1) / n : 0;
    c.run = [&pg, &c, op] { pg.reduce_scatter(view<T>(c.out), view<T>(c.in), op); };
    c.wrong = [&c, op, n] {
      return count_wrong<T>(c.out.span(), [&](std::size_t i) { return expected<T>(op, n, i); });
    };
  } else if (is(Op::all_to_all)) {
    c.bus_factor = n > 1 ? 1.0 * (n - 1) / n : 0;
    const std::size_t block = count / un;
    c.run = [&pg, &c] { pg.all_to_all(view<T>(c.out), view<T>(c.in)); };
    c.wrong = [&c, block] {
      // Every block of rank k's input holds input(k * 7, i); block j of the output is rank j's.
      return count_wrong<T>(c.out.span(), [&](std::size_t i) {
        return to<T>(input(static_cast<int>(i / block) * 7, i % block));
      });
    };
  } else {  // barrier
    c.count = 0;
    c.run = [&pg] { pg.barrier(); };
    c.wrong = [] { return 0L; };
  }
}

}  // namespace

std::vector<std::string> bench_op_names() {
  std::vector<std::string> names;
  for (Op op : {Op::all_reduce, Op::broadcast, Op::reduce, Op::all_gather, Op::reduce_scatter,
                Op::all_to_all, Op::barrier}) {
    names.emplace_back(dist::op_name(op));
  }
  names.emplace_back(kSendRecv);
  return names;
}

DType parse_dtype(const std::string& name) {
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
                  DType::kUInt8, DType::kInt32, DType::kInt64}) {
    if (dtype_name(t) == name) return t;
  }
  throw InvalidArgument("unknown datatype '" + name + "'");
}

dist::ReduceOp parse_redop(const std::string& name) {
  const std::map<std::string, ReduceOp> ops{{"sum", ReduceOp::kSum}, {"prod", ReduceOp::kProduct},
                                            {"min", ReduceOp::kMin}, {"max", ReduceOp::kMax},
                                            {"avg", ReduceOp::kAvg}, {"band", ReduceOp::kBAnd},
                                            {"bor", ReduceOp::kBOr}, {"bxor", ReduceOp::kBXor}};
  const auto it = ops.find(name);
  if (it == ops.end()) throw InvalidArgument("unknown reduce op '" + name + "'");
  return it->second;
}

SizeResult bench_size(ProcessGroup& pg, const BenchOptions& o, std::size_t bytes) {
  return with_dtype(o.dtype, [&]<class T>() {
    Case c;
    make_case<T>(c, pg, o, bytes);
    c.fill();
    std::vector<double> times;
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      if (o.between) {
        o.between();
      } else {
        pg.barrier();  // start together; not timed
      }
      const auto start = std::chrono::steady_clock::now();
      c.run();
      const std::chrono::duration<double, std::micro> took =
          std::chrono::steady_clock::now() - start;
      if (it >= o.warmup) times.push_back(took.count());
    }
    // The median, best and 99th percentile (nearest rank), each the slowest rank's.
    std::sort(times.begin(), times.end());
    const auto p99 = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(times.size())));
    std::vector<double> stats{times[times.size() / 2], times.front(),
                              times[std::max<std::size_t>(p99, 1) - 1]};
    pg.all_reduce(stats, ReduceOp::kMax);
    std::vector<std::int64_t> wrong{0};
    if (o.check) {
      c.fill();  // repeated all-reduces changed the inputs: one fresh run to check
      c.run();
      wrong[0] = c.wrong();
      pg.all_reduce(wrong, ReduceOp::kSum);
    }
    SizeResult r;
    r.count = c.count;
    r.bytes = c.count * sizeof(T);
    r.root = c.root;
    r.time_us = stats[0];
    r.best_us = stats[1];
    r.p99_us = stats[2];
    r.algbw = r.time_us > 0 ? static_cast<double>(r.bytes) / (r.time_us * 1e3) : 0;
    r.busbw = r.algbw * c.bus_factor;
    r.wrong = wrong[0];
    return r;
  });
}

}  // namespace weft::tools
