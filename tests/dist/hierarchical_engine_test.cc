// The hierarchical engine's two-level algorithms against what the flat ones give, on ranks
// as threads laid out as hosts x ranks per host (the local and cross engines here are generic
// engines over the thread transport, standing in for shm and tcp; tests/dist/netns runs the
// auto backend itself across namespaces).
#include "weft/dist/auto/hierarchical_engine.h"

#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <thread>

#include "weft/dist/engine/generic_engine.h"
#include "weft/dist/threads/thread_transport.h"

namespace weft::dist {
namespace {

struct Shape {
  int hosts;
  int per_host;
};

// Runs fn(rank, engine) on every rank of a hosts x per_host job, as threads.
void run_hierarchical(Shape shape, const std::function<void(int, HierarchicalEngine&)>& fn) {
  const int n = shape.hosts * shape.per_host;
  auto hub = std::make_shared<ThreadHub>(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto t = std::make_shared<ThreadTransport>(hub, r);
      const HostLayout layout{shape.hosts, shape.per_host, r / shape.per_host, r % shape.per_host};
      std::vector<int> host(static_cast<std::size_t>(shape.per_host));
      std::iota(host.begin(), host.end(), layout.host * shape.per_host);
      std::vector<int> cross;
      for (int h = 0; h < shape.hosts; ++h) cross.push_back(h * shape.per_host + layout.local);
      std::vector<int> all(static_cast<std::size_t>(n));
      std::iota(all.begin(), all.end(), 0);
      HierarchicalEngine engine(layout, std::make_unique<GenericEngine>(t, host),
                                std::make_unique<GenericEngine>(t, cross),
                                std::make_unique<GenericEngine>(t, all));
      fn(r, engine);
    });
  }
  for (auto& t : threads) t.join();
}

OpContext op(int seq) { return OpContext{Tag(seq) << 11, Deadline::after(Seconds(20))}; }

class HierarchicalEngineTest : public testing::TestWithParam<Shape> {};

TEST_P(HierarchicalEngineTest, AllReduceSumsEveryRanksValuesAtEverySize) {
  const Shape shape = GetParam();
  const int n = shape.hosts * shape.per_host;
  // Small (one rank per host crosses), sharded (large, divisible), large but indivisible,
  // and chunked with the levels overlapped (from 4 MiB; 6 MiB with a short last chunk).
  const std::vector<std::size_t> counts{1, 7, 64 * 1024, 64 * 1024 + 1, 6 * 131'073};
  run_hierarchical(shape, [&](int rank, HierarchicalEngine& engine) {
    int seq = 0;
    for (std::size_t count : counts) {
      std::vector<double> buf(count);
      for (std::size_t i = 0; i < count; ++i) buf[i] = rank * 1000.0 + static_cast<double>(i);
      engine.all_reduce(Buffer(buf), ReduceOp::kSum, op(seq++));
      for (std::size_t i = 0; i < count; ++i) {
        const double expected = 1000.0 * n * (n - 1) / 2 + static_cast<double>(i) * n;
        ASSERT_EQ(buf[i], expected) << "rank " << rank << " count " << count << " at " << i;
      }
    }
  });
}

TEST_P(HierarchicalEngineTest, BroadcastFromEveryRootReachesEveryRank) {
  const Shape shape = GetParam();
  const int n = shape.hosts * shape.per_host;
  run_hierarchical(shape, [&](int rank, HierarchicalEngine& engine) {
    for (int root = 0; root < n; ++root) {
      std::vector<int> buf(100, rank == root ? root + 1 : -1);
      engine.broadcast(Buffer(buf), root, op(root));
      ASSERT_EQ(buf, std::vector<int>(100, root + 1)) << "rank " << rank << " root " << root;
    }
  });
}

TEST_P(HierarchicalEngineTest, AllGatherPutsBlocksInRankOrderEvenInPlaceAndIntoAList) {
  const Shape shape = GetParam();
  const int n = shape.hosts * shape.per_host;
  run_hierarchical(shape, [&](int rank, HierarchicalEngine& engine) {
    const std::size_t block = 5;
    std::vector<float> out(block * n, -1.0f);
    std::vector<float> in(block);
    for (std::size_t i = 0; i < block; ++i) in[i] = static_cast<float>(rank * 10 + i);
    engine.all_gather(Buffer(out), Buffer(in), op(0));
    // In place: this rank's block of `out` is the input.
    std::vector<float> inplace(block * n, -1.0f);
    std::copy(in.begin(), in.end(), inplace.begin() + rank * block);
    engine.all_gather(Buffer(inplace),
                      Buffer(inplace.data() + rank * block, block, DType::kFloat32), op(1));
    // Into a list of separate buffers.
    std::vector<std::vector<float>> parts(n, std::vector<float>(block, -1.0f));
    engine.all_gather_list(std::vector<Buffer>(parts.begin(), parts.end()), Buffer(in), op(2));
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < block; ++i) {
        ASSERT_EQ(out[r * block + i], static_cast<float>(r * 10 + i)) << "rank " << rank;
        ASSERT_EQ(inplace[r * block + i], static_cast<float>(r * 10 + i)) << "rank " << rank;
        ASSERT_EQ(parts[r][i], static_cast<float>(r * 10 + i)) << "rank " << rank;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, HierarchicalEngineTest,
                         testing::Values(Shape{2, 2}, Shape{3, 2}, Shape{2, 3}),
                         [](const testing::TestParamInfo<Shape>& param_info) {
                           return std::to_string(param_info.param.hosts) + "hosts_x" +
                                  std::to_string(param_info.param.per_host);
                         });

}  // namespace
}  // namespace weft::dist
