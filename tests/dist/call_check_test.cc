// Debug mode: with WEFT_DIST_DEBUG=detail, ranks that call different collectives all throw
// CollectiveMismatch listing each rank's call, instead of hanging or mixing data.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <mutex>
#include <string>
#include <vector>

#include "weft/dist.h"

namespace weft::dist {
namespace {

using testing::HasSubstr;

class CallCheckTest : public testing::Test {
 protected:
  // Read once per process, before the first collective: every test here sets it first.
  void SetUp() override { ::setenv("WEFT_DIST_DEBUG", "detail", 1); }
};

std::vector<std::string> mismatch_messages(int n, const std::function<void(ProcessGroup&)>& fn) {
  std::mutex mu;
  std::vector<std::string> messages;
  run_threads(n, [&](ProcessGroup& pg) {
    try {
      fn(pg);
    } catch (const CollectiveMismatch& e) {
      std::lock_guard lock(mu);
      messages.push_back(e.what());
    }
  });
  return messages;
}

TEST_F(CallCheckTest, DifferentCountsAreReportedOnEveryRank) {
  const auto messages = mismatch_messages(3, [](ProcessGroup& pg) {
    std::vector<float> v(pg.rank() == 1 ? 12 : 10);
    pg.all_reduce(v);
  });
  ASSERT_EQ(messages.size(), 3u);
  for (const auto& m : messages) {
    EXPECT_THAT(m, HasSubstr("rank 0: all_reduce(count=10, dtype=float32, op=sum)"));
    EXPECT_THAT(m, HasSubstr("rank 1: all_reduce(count=12, dtype=float32, op=sum)"));
  }
}

TEST_F(CallCheckTest, DifferentOperationsAreReported) {
  const auto messages = mismatch_messages(2, [](ProcessGroup& pg) {
    std::vector<int> v(4);
    if (pg.rank() == 0) {
      pg.broadcast(v, 0);
    } else {
      pg.all_reduce(v, ReduceOp::kMax);
    }
  });
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_THAT(messages[0], HasSubstr("broadcast(count=4, dtype=int32, root=0)"));
  EXPECT_THAT(messages[0], HasSubstr("all_reduce(count=4, dtype=int32, op=max)"));
}

TEST_F(CallCheckTest, MatchingCallsRunNormally) {
  run_threads(4, [](ProcessGroup& pg) {
    std::vector<double> v(100, 1.0);
    pg.all_reduce(v);
    EXPECT_EQ(v[0], 4.0);
    std::vector<double> out(400);
    pg.all_gather(out, v);
    pg.barrier();
  });
}

}  // namespace
}  // namespace weft::dist
