// The tcp backend with ranks as forked processes: every collective's values, a killed rank,
// a rank that never arrives. (dist_worker.cc runs the value checks under weftrun.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "tests/dist/collective_checks.h"
#include "tests/support/forked_ranks.h"
#include "weft/dist.h"
#include "weft/dist/init.h"

namespace weft::dist {
namespace {

using namespace std::chrono_literals;

class TcpTest : public testing::TestWithParam<int> {};

TEST_P(TcpTest, AllCollectivesAsProcesses) {
  const auto exits = weft::test::run_forked_ranks(GetParam(), [](int) {
    auto pg = init_process_group({.backend = "tcp", .timeout = Seconds(60)});
    test::all_checks<float>(*pg);
    test::all_checks<BFloat16>(*pg);
    test::all_checks<std::int64_t>(*pg);
    return testing::Test::HasFailure() ? 1 : 0;
  });
  for (const auto& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.code;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, TcpTest, testing::Values(1, 2, 3, 4),
                         [](const auto& p) { return std::to_string(p.param) + "ranks"; });

// Rank 1 is killed in the middle of a series of large all-reduces: the others must fail
// with PeerError naming it, quickly, not wait out the 60 s timeout.
TEST(TcpFailureTest, KilledRankFailsTheOthersQuickly) {
  const auto exits = weft::test::run_forked_ranks(3, [](int rank) {
    auto pg = init_process_group({.backend = "tcp", .timeout = Seconds(60)});
    std::vector<float> v(1 << 20, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      for (int i = 0; i < 50; ++i) {
        if (rank == 1 && i == 3) ::raise(SIGKILL);
        pg->all_reduce(v);
      }
    } catch (const PeerError& e) {
      const bool quick = std::chrono::steady_clock::now() - start < 10s;
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return quick && std::string(e.what()).find("rank 1") != std::string::npos ? 0 : 3;
    }
    return 2;  // should not have completed
  });
  EXPECT_FALSE(exits[1].exited);
  EXPECT_EQ(exits[1].code, SIGKILL);
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].code;
  EXPECT_TRUE(exits[2].exited && exits[2].code == 0) << exits[2].code;
}

// Rank 1 never calls the collective: rank 0 times out within the timeout plus 2 s, naming it.
TEST(TcpFailureTest, MissingRankTimesOutNamingIt) {
  const auto exits = weft::test::run_forked_ranks(2, [](int rank) {
    auto pg = init_process_group({.backend = "tcp", .timeout = Seconds(60)});
    if (rank == 1) {
      std::this_thread::sleep_for(4s);
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
  });
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].code;
}

}  // namespace
}  // namespace weft::dist
