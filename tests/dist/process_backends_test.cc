// The process backends (tcp, shm) with ranks as forked processes: every collective's values,
// a rank killed in the middle of large all-reduces, a rank that never arrives (absent on
// tcp, stopped with SIGSTOP on shm), and for shm a clean /dev/shm after each.
// (dist_worker.cc runs the value checks under weftrun too.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <tuple>

#include "tests/dist/collective_checks.h"
#include "tests/support/forked_ranks.h"
#include "weft/dist.h"

namespace weft::dist {
namespace {

using namespace std::chrono_literals;

// For shm: whether a segment the last job's ranks published is still in /dev/shm.
bool shm_segments_left(const std::string& backend, int n) {
  if (backend != "shm") return false;
  for (int r = 0; r < n; ++r) {
    const std::string path =
        "/dev/shm" + weft::test::last_job_value("attempt0/shm/name/" + std::to_string(r));
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) return true;
  }
  return false;
}

void expect_all_exited_zero(const std::vector<weft::test::RankExit>& exits) {
  for (const auto& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.code;
}

class ValuesTest : public testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ValuesTest, AllCollectivesAsProcesses) {
  const std::string backend = std::get<0>(GetParam());  // lambdas capture no bindings (clang)
  const int n = std::get<1>(GetParam());
  expect_all_exited_zero(weft::test::run_forked_ranks(n, [&](int) {
    auto pg = init_process_group({.backend = backend, .timeout = Seconds(60)});
    test::all_checks<float>(*pg);
    test::all_checks<BFloat16>(*pg);
    test::all_checks<std::int64_t>(*pg);
    test::large_checks<float>(*pg);
    test::mid_size_all_reduce_checks<std::int64_t>(*pg, 300'001);    // 2.3 MiB
    test::mid_size_all_reduce_checks<std::uint8_t>(*pg, 3'000'001);  // 2.9 MiB
    test::async_and_subgroup_checks(*pg);
    return testing::Test::HasFailure() ? 1 : 0;
  }));
  EXPECT_FALSE(shm_segments_left(backend, n));
}

INSTANTIATE_TEST_SUITE_P(Backends, ValuesTest,
                         testing::Combine(testing::Values("tcp", "shm"),
                                          testing::Values(1, 2, 3, 4)),
                         [](const auto& p) {
                           return std::get<0>(p.param) + "_" +
                                  std::to_string(std::get<1>(p.param)) + "ranks";
                         });

// All-reduces and broadcasts of SharedBuffers run in place (all-reduces: each rank writes its
// slice into the others' buffers), at every size (the table's thresholds at 0, no one-step
// all-reduce). All-reduces:
// sums and maxima from one element (slices left empty) to sizes around the chunks and slices,
// against each element's value computed on every rank; then with one rank's buffer private,
// which every rank sees and answers with its usual algorithms, the same values.
class SharedBufferTest : public testing::TestWithParam<int> {};

template <class T>
void shared_all_reduce_checks(ProcessGroup& pg, bool private_on_last) {
  const int n = pg.size();
  auto value = [](int rank, std::size_t i) {
    return static_cast<T>((i * 7 + static_cast<std::size_t>(rank) * 3) % 101);
  };
  for (const std::size_t count : {1, 7, 1000, 70'001, 1'000'003, 4'194'305}) {
    const bool shared = !(private_on_last && pg.rank() == n - 1);
    SharedBuffer memory(shared ? count * sizeof(T) : 0);
    std::vector<T> own(shared ? 0 : count);
    const std::span<T> v = shared ? memory.as<T>().first(count) : std::span<T>(own);
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (std::size_t i = 0; i < count; ++i) v[i] = value(pg.rank(), i);
      pg.all_reduce(v, op);
      long wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        T want = value(0, i);
        for (int q = 1; q < n; ++q) {
          want = op == ReduceOp::kSum ? static_cast<T>(want + value(q, i))
                                      : std::max(want, value(q, i));
        }
        wrong += v[i] != want;
      }
      EXPECT_EQ(wrong, 0) << count << " elements, op " << static_cast<int>(op);
    }
  }
}

// Broadcasts from every root: in place where the root's buffer is shared (whatever the
// others' are), the usual way where it is private (the last rank's).
void shared_broadcast_checks(ProcessGroup& pg) {
  const int n = pg.size();
  for (const std::size_t count : {1, 1000, 70'001, 1'000'003}) {
    for (int root = 0; root < n; ++root) {
      const bool shared = pg.rank() != n - 1;
      SharedBuffer memory(shared ? count * sizeof(std::int32_t) : 0);
      std::vector<std::int32_t> own(shared ? 0 : count);
      const std::span<std::int32_t> v =
          shared ? memory.as<std::int32_t>().first(count) : std::span<std::int32_t>(own);
      for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<std::int32_t>(i) * (pg.rank() + 1);
      pg.broadcast(v, root);
      long wrong = 0;
      for (std::size_t i = 0; i < count; ++i)
        wrong += v[i] != static_cast<std::int32_t>(i) * (root + 1);
      EXPECT_EQ(wrong, 0) << count << " elements from root " << root;
    }
  }
}

TEST_P(SharedBufferTest, AllReducesAndBroadcastsInPlace) {
  expect_all_exited_zero(weft::test::run_forked_ranks(GetParam(), [&](int) {
    auto pg = init_process_group({.backend = "shm", .timeout = Seconds(60)});
    CollectiveTuning every_size = pg->tuning();
    every_size.in_place_all_reduce_min = every_size.in_place_broadcast_min = 0;
    every_size.one_step_all_reduce_max = 0;  // in place from one element on
    pg->tune(every_size);
    shared_all_reduce_checks<float>(*pg, /*private_on_last=*/false);
    shared_all_reduce_checks<std::int64_t>(*pg, /*private_on_last=*/false);
    shared_all_reduce_checks<float>(*pg, /*private_on_last=*/true);
    shared_broadcast_checks(*pg);
    return testing::Test::HasFailure() ? 1 : 0;
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, SharedBufferTest, testing::Values(2, 3, 4));

// Ranks whose address space is limited (ulimit -v) have no room for an arena: the job runs
// without in-place collectives, and a SharedBuffer is refused with an error saying why.
TEST(SharedBufferLimits, RanksWithoutRoomForAnArenaRunWithout) {
  expect_all_exited_zero(weft::test::run_forked_ranks(2, [&](int rank) {
    const rlimit limit{std::size_t{4} << 30, std::size_t{4} << 30};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) return 2;
    auto pg = init_process_group({.backend = "shm", .timeout = Seconds(60)});
    std::vector<float> v(1 << 20, static_cast<float>(rank + 1));
    pg->all_reduce(v);
    EXPECT_EQ(std::count(v.begin(), v.end(), 3.0f), static_cast<long>(v.size()));
    EXPECT_THROW(SharedBuffer(1 << 20), Error);
    return testing::Test::HasFailure() ? 1 : 0;
  }));
}

// shm gives subgroups engines of their own from a pool of regions per rank: the two
// dimensions of a 2 x 2 mesh get one each, run every collective right, also concurrently
// with the world's, and once the pool is spent later groups fall back to the general
// algorithms with the same results.
TEST(ShmSubgroupTest, SubgroupsRunOnEnginesOfTheirOwn) {
  expect_all_exited_zero(weft::test::run_forked_ranks(4, [&](int rank) {
    auto pg = init_process_group({.backend = "shm", .timeout = Seconds(60)});
    EXPECT_EQ(pg->engine_name(), "shm");
    auto rows = pg->split(rank / 2);  // {0, 1} {2, 3}
    auto cols = pg->split(rank % 2);  // {0, 2} {1, 3}
    EXPECT_EQ(rows->engine_name(), "shm");
    EXPECT_EQ(cols->engine_name(), "shm");
    test::all_checks<float>(*rows);
    test::all_checks<std::int64_t>(*cols);
    test::large_checks<float>(*cols);
    std::vector<float> world(200'000, 1.0f), row(100'000, static_cast<float>(rank));
    auto w = pg->all_reduce_async(world);
    auto c = cols->all_reduce_async(row);
    rows->barrier();
    w->wait();
    c->wait();
    EXPECT_EQ(world.back(), 4.0f);
    EXPECT_EQ(row.back(), static_cast<float>(rank % 2 + rank % 2 + 2));
    std::vector<std::shared_ptr<ProcessGroup>> more;
    for (int i = 0; i < 6; ++i) more.push_back(pg->split(0));
    EXPECT_EQ(more[3]->engine_name(), "shm");      // regions 3..6 of each rank
    EXPECT_EQ(more[4]->engine_name(), "generic");  // the pool of 6 is spent
    test::all_checks<float>(*more[4]);
    return testing::Test::HasFailure() ? 1 : 0;
  }));
  EXPECT_FALSE(shm_segments_left("shm", 4));
}

// A rank killed during a subgroup's large all-reduce: its partner fails with PeerError naming
// it by its rank in the job.
TEST(ShmSubgroupTest, KilledRankFailsItsSubgroupNamingItsJobRank) {
  const auto exits = weft::test::run_forked_ranks(4, [&](int rank) {
    auto pg = init_process_group({.backend = "shm", .timeout = Seconds(10)});
    auto pair = pg->split(rank / 2);  // rank 3 is rank 1 of {2, 3}
    if (rank < 2) {                   // stay alive until the others are done: only rank 3 dies
      std::this_thread::sleep_for(3s);
      return 0;
    }
    std::vector<float> v(1 << 20, 1.0f);
    try {
      for (int i = 0; i < 50; ++i) {
        if (rank == 3 && i == 3) ::raise(SIGKILL);
        pair->all_reduce(v);
      }
    } catch (const PeerError& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return std::string(e.what()).find("rank 3") != std::string::npos ? 0 : 3;
    }
    return 2;
  });
  EXPECT_EQ(exits[3].code, SIGKILL);
  EXPECT_TRUE(exits[2].exited && exits[2].code == 0) << exits[2].code;
  EXPECT_FALSE(shm_segments_left("shm", 4));
}

class FailureTest : public testing::TestWithParam<std::string> {};

// Rank 1 is killed in the middle of a series of large all-reduces: the others fail with
// PeerError naming it, well within the 10 s timeout plus 2 s.
TEST_P(FailureTest, KilledRankFailsTheOthers) {
  const std::string backend = GetParam();
  const auto exits = weft::test::run_forked_ranks(3, [&](int rank) {
    auto pg = init_process_group({.backend = backend, .timeout = Seconds(10)});
    std::vector<float> v(1 << 20, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      for (int i = 0; i < 50; ++i) {
        if (rank == 1 && i == 3) ::raise(SIGKILL);
        pg->all_reduce(v);
      }
    } catch (const PeerError& e) {
      const bool quick = std::chrono::steady_clock::now() - start < 12s;
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return quick && std::string(e.what()).find("rank 1") != std::string::npos ? 0 : 3;
    }
    return 2;  // should not have completed
  });
  EXPECT_FALSE(exits[1].exited);
  EXPECT_EQ(exits[1].code, SIGKILL);
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].code;
  EXPECT_TRUE(exits[2].exited && exits[2].code == 0) << exits[2].code;
  EXPECT_FALSE(shm_segments_left(backend, 3));
}

// Ranks that disagree about a collective (sizes, or which collective) fail at once with an
// error naming both calls, instead of reading each other's data (shm's engine checks the
// call of every step it reads; tcp's algorithms check message sizes).
TEST_P(FailureTest, MismatchedCollectivesFailOnEveryRank) {
  const std::string backend = GetParam();
  const auto exits = weft::test::run_forked_ranks(2, [&](int rank) {
    auto pg = init_process_group({.backend = backend, .timeout = Seconds(10)});
    std::vector<float> v(rank == 0 ? 4 : 8, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      pg->all_reduce(v);
      pg->barrier();
    } catch (const weft::Error& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return std::chrono::steady_clock::now() - start < 5s ? 0 : 3;
    }
    return 2;
  });
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].code;
  EXPECT_TRUE(exits[1].exited && exits[1].code == 0) << exits[1].code;
}

// Ranks that name different roots: on shm and tcp a broadcast where every rank names itself
// reads nothing from anyone, so only debug mode (WEFT_DIST_DEBUG=detail, which compares every
// call's op, size, dtype, root and reduce op first) can tell; with it, every rank fails at
// once with CollectiveMismatch naming each rank's call. The same for a reduce, which would
// otherwise wait out its timeout at the roots.
TEST_P(FailureTest, MismatchedRootsFailOnEveryRankInDebugMode) {
  const std::string backend = GetParam();
  for (const bool broadcast : {true, false}) {
    const auto exits = weft::test::run_forked_ranks(2, [&](int rank) {
      ::setenv("WEFT_DIST_DEBUG", "detail", 1);
      auto pg = init_process_group({.backend = backend, .timeout = Seconds(10)});
      std::vector<float> v(4, 1.0f);
      const auto start = std::chrono::steady_clock::now();
      try {
        if (broadcast) {
          pg->broadcast(v, rank);
        } else {
          pg->reduce(v, rank);
        }
      } catch (const CollectiveMismatch& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        const bool both = std::string(e.what()).find("root=0") != std::string::npos &&
                          std::string(e.what()).find("root=1") != std::string::npos;
        return both && std::chrono::steady_clock::now() - start < 5s ? 0 : 3;
      }
      return 2;
    });
    EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << broadcast << " " << exits[0].code;
    EXPECT_TRUE(exits[1].exited && exits[1].code == 0) << broadcast << " " << exits[1].code;
  }
}

// Rank 1 never calls the collective (on shm it is stopped with SIGSTOP, and the harness
// kills it at the end): rank 0 times out within the timeout plus 2 s, naming it.
TEST_P(FailureTest, MissingRankTimesOutNamingIt) {
  const std::string backend = GetParam();
  const auto exits = weft::test::run_forked_ranks(
      2,
      [&](int rank) {
        auto pg = init_process_group({.backend = backend, .timeout = Seconds(60)});
        if (rank == 1) {
          if (backend == "shm") ::raise(SIGSTOP);
          std::this_thread::sleep_for(3s);
          return 0;
        }
        std::vector<int> v(8);
        const auto start = std::chrono::steady_clock::now();
        try {
          pg->all_reduce(v, ReduceOp::kSum, {.timeout = 1s});
        } catch (const TimeoutError& e) {
          const bool in_time = std::chrono::steady_clock::now() - start < 3s;
          const bool named = std::string(e.what()).find("rank 1") != std::string::npos;
          return in_time && named ? 0 : 3;
        }
        return 2;
      },
      std::chrono::seconds(5));
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].code;
  EXPECT_FALSE(shm_segments_left(backend, 2));
}

INSTANTIATE_TEST_SUITE_P(Backends, FailureTest, testing::Values("tcp", "shm"),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace weft::dist
