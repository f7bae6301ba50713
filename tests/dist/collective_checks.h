// The value checks every collective test runs, on any backend: each rank calls these with
// its ProcessGroup, and every operation is compared with values computed here by plain loops
// (world sizes, every dtype and reduce op, counts 0, 1, 7, 1000 and 70,000).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "weft/dist.h"

namespace weft::dist::test {

// 70,000 floats: the generic engine's ring all-reduce (from 256 KiB).
inline const std::vector<std::size_t> kCounts = {0, 1, 7, 1000, 70'000};

// The value rank r contributes at index i: small integers, exact in every dtype.
inline double input(int r, std::size_t i) {
  return static_cast<double>((r + static_cast<int>(i)) % 3 + 1);
}

template <class T>
T to(double x) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(x));
  } else {
    return static_cast<T>(x);
  }
}

template <class T>
double from(T x) {
  return static_cast<double>(static_cast<float>(x));
}
template <>
inline double from<double>(double x) {
  return x;
}
template <>
inline double from<std::int64_t>(std::int64_t x) {
  return static_cast<double>(x);
}

template <class T>
std::vector<T> inputs(int r, std::size_t count) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = to<T>(input(r, i));
  return v;
}

// The expected reduction, with the arithmetic the implementation promises: integers in
// their own type, 16-bit floats in float32, rounded once at the end.
template <class T>
T expected(ReduceOp op, int n, std::size_t i) {
  using Acc = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;
  Acc acc = static_cast<Acc>(input(0, i));
  for (int r = 1; r < n; ++r) {
    const Acc v = static_cast<Acc>(input(r, i));
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc = static_cast<Acc>(acc + v);
        break;
      case ReduceOp::kProduct:
        acc = static_cast<Acc>(acc * v);
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kBAnd:
      case ReduceOp::kBOr:
      case ReduceOp::kBXor:
        if constexpr (std::is_integral_v<Acc>) {
          if (op == ReduceOp::kBAnd) acc = static_cast<Acc>(acc & v);
          if (op == ReduceOp::kBOr) acc = static_cast<Acc>(acc | v);
          if (op == ReduceOp::kBXor) acc = static_cast<Acc>(acc ^ v);
        }
        break;
    }
  }
  if (op == ReduceOp::kAvg) acc = static_cast<Acc>(acc / static_cast<Acc>(n));
  return to<T>(static_cast<double>(acc));
}

template <class T>
std::vector<ReduceOp> ops_for() {
  std::vector<ReduceOp> ops{ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kAvg};
  if (!is_floating(dtype_of<T>())) {
    ops.insert(ops.end(), {ReduceOp::kBAnd, ReduceOp::kBOr, ReduceOp::kBXor});
  }
  return ops;
}

template <class T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(from(got[i]), from(want[i])) << what << " at " << i;
  }
}

template <class T>
void reducing_ops(ProcessGroup& pg) {
  const int n = pg.size();
  const int r = pg.rank();
  for (std::size_t count : kCounts) {
    for (ReduceOp op : ops_for<T>()) {
      const std::string what = std::string(dtype_name(dtype_of<T>())) + " " +
                               std::string(reduce_op_name(op)) + " count " + std::to_string(count) +
                               " n " + std::to_string(n);
      std::vector<T> want(count);
      for (std::size_t i = 0; i < count; ++i) want[i] = expected<T>(op, n, i);

      std::vector<T> v = inputs<T>(r, count);
      pg.all_reduce(v, op);
      expect_equal(v, want, "all_reduce " + what);

      for (int root = 0; root < n; root += std::max(1, n - 1)) {
        std::vector<T> w = inputs<T>(r, count);
        pg.reduce(w, root, op);
        expect_equal(w, r == root ? want : inputs<T>(r, count), "reduce " + what);
      }

      // reduce_scatter: rank k contributes input(k, i) at i of every block.
      const std::size_t block = count / 8 + 1;
      std::vector<T> in(block * static_cast<std::size_t>(n));
      for (std::size_t b = 0; b < static_cast<std::size_t>(n); ++b) {
        for (std::size_t i = 0; i < block; ++i) in[b * block + i] = to<T>(input(r, b + i));
      }
      std::vector<T> out(block);
      pg.reduce_scatter(out, in, op);
      std::vector<T> want_rs(block);
      for (std::size_t i = 0; i < block; ++i) {
        want_rs[i] = expected<T>(op, n, static_cast<std::size_t>(r) + i);
      }
      expect_equal(out, want_rs, "reduce_scatter " + what);
    }
  }
}

// all_gather_v and all_to_all_v with blocks of different sizes, some empty.
template <class T>
void variable_size_ops(ProcessGroup& pg, std::size_t count, const std::string& what) {
  const int n = pg.size();
  const int r = pg.rank();
  const auto un = static_cast<std::size_t>(n);
  // all_gather_v: rank k contributes count * (k + 1) / n elements (rank 0 none when small).
  std::vector<std::size_t> counts(un);
  std::vector<T> want_v;
  for (int k = 0; k < n; ++k) {
    counts[static_cast<std::size_t>(k)] = count * static_cast<std::size_t>(k + 1) / un;
    auto part = inputs<T>(k, counts[static_cast<std::size_t>(k)]);
    want_v.insert(want_v.end(), part.begin(), part.end());
  }
  std::vector<T> gathered_v(want_v.size());
  std::vector<T> mine = inputs<T>(r, counts[static_cast<std::size_t>(r)]);
  pg.all_gather_v(gathered_v, mine, counts);
  expect_equal(gathered_v, want_v, "all_gather_v " + what);

  // all_to_all_v: rank a sends size(a, b) elements input(a * 10 + b, i) to rank b.
  auto size = [&](int a, int b) { return static_cast<std::size_t>((a + 2 * b) % 3) * (count / 8); };
  std::vector<std::size_t> in_counts(un), out_counts(un);
  std::vector<T> in, want;
  for (int k = 0; k < n; ++k) {
    in_counts[static_cast<std::size_t>(k)] = size(r, k);
    out_counts[static_cast<std::size_t>(k)] = size(k, r);
    for (std::size_t i = 0; i < size(r, k); ++i) in.push_back(to<T>(input(r * 10 + k, i)));
    for (std::size_t i = 0; i < size(k, r); ++i) want.push_back(to<T>(input(k * 10 + r, i)));
  }
  std::vector<T> out(want.size());
  pg.all_to_all_v(out, out_counts, in, in_counts);
  expect_equal(out, want, "all_to_all_v " + what);
}

template <class T>
void data_movement_ops(ProcessGroup& pg) {
  const int n = pg.size();
  const int r = pg.rank();
  const auto un = static_cast<std::size_t>(n);
  for (std::size_t count : kCounts) {
    const std::string what = std::string(dtype_name(dtype_of<T>())) + " count " +
                             std::to_string(count) + " n " + std::to_string(n);
    for (int root = 0; root < n; ++root) {
      std::vector<T> b = r == root ? inputs<T>(root, count) : std::vector<T>(count);
      pg.broadcast(b, root);
      expect_equal(b, inputs<T>(root, count), "broadcast " + what);
    }
    std::vector<T> want_all;
    for (int k = 0; k < n; ++k) {
      auto part = inputs<T>(k, count);
      want_all.insert(want_all.end(), part.begin(), part.end());
    }
    std::vector<T> mine = inputs<T>(r, count);
    std::vector<T> gathered(count * un);
    pg.all_gather(gathered, mine);
    expect_equal(gathered, want_all, "all_gather " + what);

    // In place: this rank's input already sits in its slot of the output.
    std::vector<T> in_place(count * un);
    std::copy_n(mine.begin(), count,
                in_place.begin() + static_cast<long>(count * static_cast<std::size_t>(r)));
    pg.all_gather(in_place, Buffer(in_place.data() + count * static_cast<std::size_t>(r), count,
                                   dtype_of<T>()));
    expect_equal(in_place, want_all, "all_gather in place " + what);

    // Into separate buffers (torch's list form), this rank's own block given in place, and
    // into adjacent slices of one buffer (the flat form underneath).
    std::vector<std::vector<T>> parts(un, std::vector<T>(count));
    parts[static_cast<std::size_t>(r)] = mine;
    std::vector<Buffer> part_buffers(parts.begin(), parts.end());
    pg.all_gather(part_buffers, Buffer(parts[static_cast<std::size_t>(r)]));
    std::vector<T> joined;
    for (const auto& p : parts) joined.insert(joined.end(), p.begin(), p.end());
    expect_equal(joined, want_all, "all_gather into a list " + what);
    std::vector<T> slices(count * un);
    std::vector<Buffer> slice_buffers;
    for (std::size_t k = 0; k < un; ++k) {
      slice_buffers.emplace_back(slices.data() + k * count, count, dtype_of<T>());
    }
    pg.all_gather(slice_buffers, mine);
    expect_equal(slices, want_all, "all_gather into slices " + what);

    const int root = n - 1;
    std::vector<T> g(r == root ? count * un : 0);
    pg.gather(g, mine, root);
    if (r == root) expect_equal(g, want_all, "gather " + what);

    std::vector<T> s(count);
    std::vector<T> source = r == root ? want_all : std::vector<T>();
    pg.scatter(s, source, root);
    expect_equal(s, inputs<T>(r, count), "scatter " + what);

    // all_to_all: block j of rank k's input is input(k * 10 + j, i).
    const std::size_t block = count / un;
    std::vector<T> a2a_in(block * un), a2a_out(block * un), want_a2a(block * un);
    for (std::size_t j = 0; j < un; ++j) {
      for (std::size_t i = 0; i < block; ++i) {
        a2a_in[j * block + i] = to<T>(input(r * 10 + static_cast<int>(j), i));
        want_a2a[j * block + i] = to<T>(input(static_cast<int>(j) * 10 + r, i));
      }
    }
    pg.all_to_all(a2a_out, a2a_in);
    expect_equal(a2a_out, want_a2a, "all_to_all " + what);
    pg.all_to_all(a2a_in, a2a_in);
    expect_equal(a2a_in, want_a2a, "all_to_all in place " + what);
    variable_size_ops<T>(pg, count, what);
  }
}

// Every check above for one dtype.
template <class T>
void all_checks(ProcessGroup& pg) {
  reducing_ops<T>(pg);
  data_movement_ops<T>(pg);
}

// All-reduces of 1-4 MiB (the shm engine's single-copy range with a core per rank), odd
// counts so that the last chunk is partial, summed and maximised, for one dtype.
template <class T>
void mid_size_all_reduce_checks(ProcessGroup& pg, std::size_t count) {
  const int n = pg.size();
  const std::string what =
      std::string(dtype_name(dtype_of<T>())) + " mid-size n " + std::to_string(n);
  auto value = [](int rank, std::size_t i) {
    return static_cast<T>((i * 7 + static_cast<std::size_t>(rank) * 3) % 101);
  };
  std::vector<T> v(count), sum(count), max(count);
  for (std::size_t i = 0; i < count; ++i) {
    v[i] = value(pg.rank(), i);
    for (int q = 0; q < n; ++q) {
      sum[i] = static_cast<T>(sum[i] + value(q, i));
      max[i] = std::max(max[i], value(q, i));
    }
  }
  std::vector<T> w = v;
  pg.all_reduce(v);
  expect_equal(v, sum, "all_reduce " + what);
  pg.all_reduce(w, ReduceOp::kMax);
  expect_equal(w, max, "all_reduce max " + what);
}

// Large buffers (several chunks of the shm engine, slices of uneven length) whose values
// differ at every index, so that a chunk or slice put in the wrong place is seen.
template <class T>
void large_checks(ProcessGroup& pg) {
  const int n = pg.size();
  const int r = pg.rank();
  const auto un = static_cast<std::size_t>(n);
  const std::size_t count = 1'000'003;
  auto value = [](int rank, std::size_t i) {
    return static_cast<T>(i + static_cast<std::size_t>(rank));
  };
  auto filled = [&](int rank, std::size_t len, std::size_t from = 0) {
    std::vector<T> v(len);
    for (std::size_t i = 0; i < len; ++i) v[i] = value(rank, from + i);
    return v;
  };
  const T ranks_sum = static_cast<T>(n * (n - 1) / 2);
  std::vector<T> summed(count);
  for (std::size_t i = 0; i < count; ++i)
    summed[i] = static_cast<T>(static_cast<T>(n) * static_cast<T>(i) + ranks_sum);
  const std::string what = std::string(dtype_name(dtype_of<T>())) + " large n " + std::to_string(n);

  std::vector<T> v = filled(r, count);
  pg.all_reduce(v);
  expect_equal(v, summed, "all_reduce " + what);
  v = filled(r, count);
  pg.reduce(v, n - 1);
  expect_equal(v, r == n - 1 ? summed : filled(r, count), "reduce " + what);
  v = filled(r, count);
  pg.broadcast(v, n - 1);
  expect_equal(v, filled(n - 1, count), "broadcast " + what);

  const std::size_t block = count / un;
  std::vector<T> in = filled(r, block * un), out(block);
  pg.reduce_scatter(out, in);
  expect_equal(
      out,
      std::vector<T>(summed.begin() + static_cast<long>(block * static_cast<std::size_t>(r)),
                     summed.begin() + static_cast<long>(block * static_cast<std::size_t>(r + 1))),
      "reduce_scatter " + what);

  std::vector<T> gathered(block * un), want_gathered;
  for (int k = 0; k < n; ++k) {
    auto part = filled(k, block);
    want_gathered.insert(want_gathered.end(), part.begin(), part.end());
  }
  std::vector<T> mine = filled(r, block);
  pg.all_gather(gathered, mine);
  expect_equal(gathered, want_gathered, "all_gather " + what);

  // all_to_all: rank k sends filled(k, block, j * block) to rank j.
  std::vector<T> a2a = filled(r, block * un), want_a2a;
  for (int k = 0; k < n; ++k) {
    auto part = filled(k, block, block * static_cast<std::size_t>(r));
    want_a2a.insert(want_a2a.end(), part.begin(), part.end());
  }
  pg.all_to_all(a2a, a2a);
  expect_equal(a2a, want_a2a, "all_to_all in place " + what);
}

// Async operations queued back to back, and a subgroup working while the world group does
// (on shm the two take different paths: the step engine and the rings).
inline void async_and_subgroup_checks(ProcessGroup& pg) {
  const int n = pg.size();
  const int r = pg.rank();
  std::vector<float> small{static_cast<float>(r)}, large(300'000, static_cast<float>(r + 1));
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  std::vector<std::int64_t> mine{r * 10};
  auto w1 = pg.all_reduce_async(small);
  auto w2 = pg.all_reduce_async(large, ReduceOp::kMax);
  auto w3 = pg.all_gather_async(ids, mine);
  w1->wait();
  w2->wait();
  w3->wait();
  EXPECT_EQ(small[0], static_cast<float>(n * (n - 1) / 2));
  EXPECT_EQ(large.front(), static_cast<float>(n));
  EXPECT_EQ(large.back(), static_cast<float>(n));
  for (int k = 0; k < n; ++k) EXPECT_EQ(ids[static_cast<std::size_t>(k)], k * 10);

  auto half = pg.split(r % 2);
  std::vector<float> world_sum(100'000, 1.0f);
  auto world_work = pg.all_reduce_async(world_sum);
  std::vector<float> sub_sum(50'000, static_cast<float>(r));
  half->all_reduce(sub_sum);
  world_work->wait();
  float want_sub = 0;
  for (int k = r % 2; k < n; k += 2) want_sub += static_cast<float>(k);
  EXPECT_EQ(sub_sum.front(), want_sub);
  EXPECT_EQ(sub_sum.back(), want_sub);
  EXPECT_EQ(world_sum.back(), static_cast<float>(n));
  pg.barrier();
}

inline void all_checks_every_dtype(ProcessGroup& pg) {
  async_and_subgroup_checks(pg);
  large_checks<float>(pg);
  large_checks<std::int64_t>(pg);
  all_checks<float>(pg);
  all_checks<double>(pg);
  all_checks<Half>(pg);
  all_checks<BFloat16>(pg);
  all_checks<std::int8_t>(pg);
  all_checks<std::uint8_t>(pg);
  all_checks<std::int32_t>(pg);
  all_checks<std::int64_t>(pg);
}

}  // namespace weft::dist::test
