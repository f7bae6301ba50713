// The shm backend with ranks as forked processes: every collective's values, a rank killed
// mid all-reduce, a stopped rank, and /dev/shm left clean after all of them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/dist/collective_checks.h"
#include "tests/support/forked_ranks.h"
#include "weft/dist.h"

namespace weft::dist {
namespace {

using namespace std::chrono_literals;

// The segment names the ranks of the last run published (their stores are under attempt0/).
bool segments_left(int n) {
  for (int r = 0; r < n; ++r) {
    const std::string path = "/dev/shm" + weft::test::last_job_value("attempt0/shm/name/" +
                                                                     std::to_string(r));
    struct stat st{};
    if (::stat(path.c_str(), &st) == 0) return true;
  }
  return false;
}

class ShmTest : public testing::TestWithParam<int> {};

TEST_P(ShmTest, AllCollectivesAsProcesses) {
  const auto exits = weft::test::run_forked_ranks(GetParam(), [](int) {
    auto pg = init_process_group({.backend = "shm", .timeout = Seconds(60)});
    test::all_checks<float>(*pg);
    test::all_checks<Half>(*pg);
    test::all_checks<std::int32_t>(*pg);
    return testing::Test::HasFailure() ? 1 : 0;
  });
  for (const auto& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.code;
  EXPECT_FALSE(segments_left(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmTest, testing::Values(1, 2, 3, 4),
                         [](const auto& p) { return std::to_string(p.param) + "ranks"; });

// Rank 1 is killed in the middle of a series of large all-reduces: the others fail with
// PeerError naming it, well within the timeout plus 2 s.
TEST(ShmFailureTest, KilledRankFailsTheOthers) {
  const auto exits = weft::test::run_forked_ranks(3, [](int rank) {
    auto pg = init_process_group({.backend = "shm", .timeout = Seconds(10)});
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
    return 2;
  });
  EXPECT_EQ(exits[1].code, SIGKILL);
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].code;
  EXPECT_TRUE(exits[2].exited && exits[2].code == 0) << exits[2].code;
  EXPECT_FALSE(segments_left(3));
}

// Rank 1 stops (SIGSTOP) before the collective: the others time out naming it.
TEST(ShmFailureTest, StoppedRankTimesOutNamingIt) {
  const auto exits = weft::test::run_forked_ranks(
      2,
      [](int rank) {
        auto pg = init_process_group({.backend = "shm", .timeout = Seconds(10)});
        if (rank == 1) ::raise(SIGSTOP);  // the harness kills it at the end
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
      std::chrono::seconds(4));
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].code;
  EXPECT_FALSE(segments_left(2));
}

}  // namespace
}  // namespace weft::dist
