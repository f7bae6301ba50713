// Future, wait and as_completed, driven through a ThreadPoolExecutor whose tasks are
// held at a gate so that each test decides when which future completes.
#include "weft/exec/future.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tests/support/gate.h"
#include "weft/exec.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::ElementsAre;

TEST(FutureTest, GetReturnsValueAndVoidWorks) {
  ThreadPoolExecutor pool(2);
  Future<int> f = pool.submit([](int a, int b) { return a + b; }, 2, 3);
  EXPECT_EQ(f.get(), 5);
  EXPECT_TRUE(f.done());
  EXPECT_FALSE(f.running());
  EXPECT_EQ(f.exception(), nullptr);

  std::atomic<int> hits{0};
  Future<void> v = pool.submit([&hits] { ++hits; });
  v.get();
  EXPECT_EQ(hits.load(), 1);
}

TEST(FutureTest, DefaultConstructedIsInvalid) {
  Future<int> f;
  EXPECT_FALSE(f.valid());
}

TEST(FutureTest, ExceptionKeepsItsOriginalType) {
  ThreadPoolExecutor pool(1);
  Future<int> f = pool.submit([]() -> int { throw std::out_of_range("index 7"); });
  EXPECT_THROW(f.get(), std::out_of_range);
  EXPECT_THROW(f.get(), std::out_of_range);  // every get() rethrows
  std::exception_ptr e = f.exception();
  ASSERT_NE(e, nullptr);
  try {
    std::rethrow_exception(e);
  } catch (const std::out_of_range& ex) {
    EXPECT_STREQ(ex.what(), "index 7");
  }
}

TEST(FutureTest, CopiesShareOneState) {
  ThreadPoolExecutor pool(1);
  Future<std::string> a = pool.submit([] { return std::string("shared"); });
  Future<std::string> b = a;
  EXPECT_TRUE(a == b);
  EXPECT_EQ(&a.get(), &b.get());
}

TEST(FutureTest, GetWithTimeoutThrowsTimeoutError) {
  ThreadPoolExecutor pool(1);
  test::Gate gate;
  Future<int> f = pool.submit([&gate] {
    gate.wait();
    return 1;
  });
  EXPECT_THROW(f.get(50ms), TimeoutError);
  EXPECT_FALSE(f.wait_for(10ms));
  gate.open();
  EXPECT_EQ(f.get(5s), 1);
  EXPECT_TRUE(f.wait_for(0s));
}

TEST(FutureTest, CancelOnlyWhilePending) {
  ThreadPoolExecutor pool(1);
  test::Gate started;
  test::Gate gate;
  Future<int> running = pool.submit([&] {
    started.open();
    gate.wait();
    return 1;
  });
  Future<int> pending = pool.submit([] { return 2; });
  started.wait();
  EXPECT_TRUE(running.running());
  EXPECT_FALSE(running.cancel());
  EXPECT_TRUE(pending.cancel());
  EXPECT_TRUE(pending.cancel());  // cancelling twice still reports cancelled
  EXPECT_TRUE(pending.cancelled());
  EXPECT_TRUE(pending.done());
  EXPECT_THROW(pending.get(), CancelledError);
  EXPECT_THROW((void)pending.exception(), CancelledError);
  gate.open();
  EXPECT_EQ(running.get(), 1);
  EXPECT_FALSE(running.cancel());  // finished
  EXPECT_FALSE(running.cancelled());
}

TEST(FutureTest, DoneCallbackRunsOnCompletionOrAtOnce) {
  ThreadPoolExecutor pool(1);
  test::Gate gate;
  Future<int> f = pool.submit([&gate] {
    gate.wait();
    return 7;
  });
  std::atomic<int> seen{0};
  test::Gate called;
  f.add_done_callback([&](const Future<int>& g) {
    seen = g.get();
    called.open();
  });
  EXPECT_EQ(seen.load(), 0);
  gate.open();
  called.wait();
  EXPECT_EQ(seen.load(), 7);

  bool immediate = false;
  f.add_done_callback([&] { immediate = true; });  // already done: runs here, now
  EXPECT_TRUE(immediate);
}

TEST(FutureTest, DoneCallbackRunsOnCancel) {
  ThreadPoolExecutor pool(1);
  test::Gate gate;
  Future<void> blocker = pool.submit([&gate] { gate.wait(); });
  Future<int> f = pool.submit([] { return 1; });
  bool called_cancelled = false;
  f.add_done_callback([&](const Future<int>& g) { called_cancelled = g.cancelled(); });
  EXPECT_TRUE(f.cancel());
  EXPECT_TRUE(called_cancelled);
  gate.open();
}

TEST(FutureTest, ThrowingCallbackDoesNotStopOthers) {
  ThreadPoolExecutor pool(1);
  Future<int> f = pool.submit([] { return 1; });
  f.wait();
  int calls = 0;
  f.add_done_callback([] { throw std::runtime_error("callback failure is printed"); });
  f.add_done_callback([&] { ++calls; });
  EXPECT_EQ(calls, 1);
}

TEST(WaitTest, AllCompletedReturnsEverything) {
  ThreadPoolExecutor pool(4);
  std::vector<Future<int>> fs;
  for (int i = 0; i < 20; ++i) fs.push_back(pool.submit([i] { return i; }));
  auto [done, not_done] = weft::wait(fs);
  EXPECT_EQ(done.size(), 20u);
  EXPECT_TRUE(not_done.empty());
  EXPECT_TRUE(done[3] == fs[3]);  // the very futures, in input order
}

TEST(WaitTest, FirstCompletedReturnsEarly) {
  ThreadPoolExecutor pool(2);
  test::Gate gate;
  Future<int> slow = pool.submit([&gate] {
    gate.wait();
    return 1;
  });
  Future<int> fast = pool.submit([] { return 2; });
  auto result = weft::wait(std::vector{slow, fast}, 10s, ReturnWhen::kFirstCompleted);
  ASSERT_EQ(result.done.size(), 1u);
  EXPECT_TRUE(result.done[0] == fast);
  ASSERT_EQ(result.not_done.size(), 1u);
  EXPECT_TRUE(result.not_done[0] == slow);
  gate.open();
}

TEST(WaitTest, FirstExceptionStopsAtTheFailure) {
  ThreadPoolExecutor pool(3);
  test::Gate gate;
  Future<int> slow = pool.submit([&gate] {
    gate.wait();
    return 1;
  });
  Future<int> ok = pool.submit([] { return 2; });
  ok.wait();
  Future<int> bad = pool.submit([]() -> int { throw std::logic_error("bad"); });
  auto result = weft::wait(std::vector{slow, ok, bad}, 10s, ReturnWhen::kFirstException);
  EXPECT_EQ(result.done.size(), 2u);
  ASSERT_EQ(result.not_done.size(), 1u);
  EXPECT_TRUE(result.not_done[0] == slow);
  gate.open();
}

TEST(WaitTest, FirstExceptionWithoutFailuresWaitsForAll) {
  ThreadPoolExecutor pool(2);
  std::vector<Future<int>> fs;
  for (int i = 0; i < 5; ++i) {
    fs.push_back(pool.submit([i] {
      std::this_thread::sleep_for(1ms);
      return i;
    }));
  }
  auto result = weft::wait(fs, 10s, ReturnWhen::kFirstException);
  EXPECT_EQ(result.done.size(), 5u);
}

TEST(WaitTest, TimeoutReturnsWhatIsDone) {
  ThreadPoolExecutor pool(1);
  test::Gate gate;
  Future<int> f = pool.submit([&gate] {
    gate.wait();
    return 1;
  });
  const auto start = Clock::now();
  auto result = weft::wait(std::vector{f}, 50ms);
  EXPECT_GE(Clock::now() - start, 50ms);
  EXPECT_TRUE(result.done.empty());
  EXPECT_EQ(result.not_done.size(), 1u);
  gate.open();
}

TEST(WaitTest, DuplicatesAreReportedOnce) {
  ThreadPoolExecutor pool(1);
  Future<int> f = pool.submit([] { return 1; });
  auto result = weft::wait(std::vector{f, f, f});
  EXPECT_EQ(result.done.size(), 1u);
}

TEST(AsCompletedTest, YieldsInCompletionOrder) {
  ThreadPoolExecutor pool(3);
  test::Gate g0, g1, g2;
  test::Gate* gates[] = {&g0, &g1, &g2};
  std::vector<Future<int>> fs;
  for (int i = 0; i < 3; ++i) {
    fs.push_back(pool.submit([gate = gates[i], i] {
      gate->wait();
      return i;
    }));
  }
  std::vector<int> order;
  int opened = 0;
  const int release_order[] = {2, 0, 1};
  gates[release_order[opened++]]->open();
  for (Future<int>& f : weft::as_completed(fs, 10s)) {
    order.push_back(f.get());
    if (opened < 3) gates[release_order[opened++]]->open();
  }
  EXPECT_THAT(order, ElementsAre(2, 0, 1));
}

TEST(AsCompletedTest, AlreadyDoneComeFirstAndHandlesAreTheOriginals) {
  ThreadPoolExecutor pool(2);
  test::Gate gate;
  Future<int> pending = pool.submit([&gate] {
    gate.wait();
    return 1;
  });
  Future<int> finished = pool.submit([] { return 2; });
  finished.wait();
  weft::AsCompleted<int> it = weft::as_completed(std::vector{pending, finished});
  std::optional<Future<int>> first = it.next();
  ASSERT_TRUE(first);
  EXPECT_TRUE(*first == finished);
  gate.open();
  std::optional<Future<int>> second = it.next();
  ASSERT_TRUE(second);
  EXPECT_TRUE(*second == pending);
  EXPECT_FALSE(it.next());
}

TEST(AsCompletedTest, TimeoutThrows) {
  ThreadPoolExecutor pool(1);
  test::Gate gate;
  Future<int> f = pool.submit([&gate] {
    gate.wait();
    return 1;
  });
  auto it = weft::as_completed(std::vector{f}, 30ms);
  EXPECT_THROW((void)it.next(), TimeoutError);
  gate.open();
}

TEST(AsCompletedTest, CancelledFuturesCountAsCompleted) {
  ThreadPoolExecutor pool(1);
  test::Gate gate;
  Future<int> blocker = pool.submit([&gate] {
    gate.wait();
    return 0;
  });
  Future<int> victim = pool.submit([] { return 1; });
  auto it = weft::as_completed(std::vector{victim}, 10s);
  EXPECT_TRUE(victim.cancel());
  auto got = it.next();
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->cancelled());
  gate.open();
}

}  // namespace
}  // namespace weft
