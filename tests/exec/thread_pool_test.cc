#include "weft/exec/thread_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/gate.h"
#include "weft/base/system.h"
#include "weft/exec/wait.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

TEST(ThreadPoolTest, DefaultMaxWorkersFollowsPython) {
  ThreadPoolExecutor pool;
  EXPECT_EQ(pool.max_workers(), std::min<std::size_t>(32, available_cores() + 4));
  EXPECT_EQ(pool.num_threads(), 0u);  // lazily started
}

TEST(ThreadPoolTest, RunsTasksConcurrently) {
  ThreadPoolExecutor pool(10);
  std::vector<Future<int>> fs;
  const auto start = Clock::now();
  for (int i = 0; i < 10; ++i) {
    fs.push_back(pool.submit([i] {
      std::this_thread::sleep_for(200ms);
      return i;
    }));
  }
  int sum = 0;
  for (auto& f : fs) sum += f.get();
  EXPECT_EQ(sum, 45);
  EXPECT_LT(Clock::now() - start, 1500ms);  // sequential would be 2 s
  EXPECT_EQ(pool.num_threads(), 10u);
}

TEST(ThreadPoolTest, IdleWorkersAreReusedBeforeNewOnesStart) {
  ThreadPoolExecutor pool(8);
  for (int i = 0; i < 50; ++i) {
    pool.submit([] { return 0; }).get();
    std::this_thread::sleep_for(1ms);  // the worker becomes idle before the next submit
  }
  EXPECT_EQ(pool.num_threads(), 1u);
}

// Workers that keep polling after going idle (idle_spin) still run every task, in bursts
// separated by gaps shorter and longer than the spin, and leave at shutdown while polling.
TEST(ThreadPoolTest, IdleSpinningWorkersRunEveryTaskAndShutDown) {
  ThreadPoolExecutor pool(2, {.idle_spin = std::chrono::milliseconds(20)});
  int total = 0;
  for (int burst = 0; burst < 4; ++burst) {
    std::vector<Future<int>> futures;
    for (int i = 0; i < 50; ++i) futures.push_back(pool.submit([i] { return i; }));
    for (auto& f : futures) total += f.get();
    std::this_thread::sleep_for(std::chrono::milliseconds(burst % 2 == 0 ? 1 : 40));
  }
  EXPECT_EQ(total, 4 * 49 * 50 / 2);
  pool.shutdown(/*wait=*/true);  // a worker still polling notices the shutdown
}

TEST(ThreadPoolTest, ArgumentsAreCopiedOrMoved) {
  ThreadPoolExecutor pool(2);
  auto p = std::make_unique<int>(41);
  Future<int> f = pool.submit([](std::unique_ptr<int>& q) { return *q + 1; }, std::move(p));
  EXPECT_EQ(f.get(), 42);
  std::string s = "abc";
  Future<std::size_t> g = pool.submit([](const std::string& t) { return t.size(); }, s);
  s.clear();
  EXPECT_EQ(g.get(), 3u);
}

TEST(ThreadPoolTest, ThreadNamesUsePrefix) {
  ThreadPoolExecutor pool(1, {.thread_name_prefix = "mypool"});
  std::string name = pool.submit([] {
                           char buf[16] = {};
                           pthread_getname_np(pthread_self(), buf, sizeof(buf));
                           return std::string(buf);
                         })
                         .get();
  EXPECT_EQ(name, "mypool_0");
}

TEST(ThreadPoolTest, InitializerRunsOncePerWorker) {
  std::atomic<int> inits{0};
  {
    ThreadPoolExecutor pool(3, {.initializer = [&inits] { ++inits; }});
    std::vector<Future<void>> fs;
    for (int i = 0; i < 3; ++i)
      fs.push_back(pool.submit([] { std::this_thread::sleep_for(50ms); }));
    for (auto& f : fs) f.get();
  }
  EXPECT_EQ(inits.load(), 3);
}

TEST(ThreadPoolTest, FailingInitializerBreaksThePool) {
  ThreadPoolExecutor pool(1, {.initializer = [] { throw std::runtime_error("no GPU"); }});
  Future<int> f = pool.submit([] { return 1; });
  EXPECT_THROW(f.get(5s), BrokenExecutor);
  try {
    (void)pool.submit([] { return 2; });
    FAIL() << "submit on a broken pool must throw";
  } catch (const BrokenExecutor& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("no GPU"));
  }
}

TEST(ThreadPoolTest, SubmitAfterShutdownThrows) {
  ThreadPoolExecutor pool(2);
  pool.submit([] { return 1; }).get();
  pool.shutdown();
  EXPECT_THROW((void)pool.submit([] { return 1; }), ExecutorShutdown);
  pool.shutdown();  // idempotent
}

TEST(ThreadPoolTest, ShutdownWaitRunsEverythingQueued) {
  std::atomic<int> ran{0};
  std::vector<Future<void>> fs;
  ThreadPoolExecutor pool(2);
  for (int i = 0; i < 100; ++i) {
    fs.push_back(pool.submit([&ran] {
      std::this_thread::sleep_for(100us);
      ++ran;
    }));
  }
  pool.shutdown(/*wait=*/true);
  EXPECT_EQ(ran.load(), 100);
  for (auto& f : fs) EXPECT_TRUE(f.done());
}

TEST(ThreadPoolTest, ShutdownCancelFuturesCancelsPending) {
  ThreadPoolExecutor pool(1);
  test::Gate started, gate;
  Future<int> running = pool.submit([&] {
    started.open();
    gate.wait();
    return 1;
  });
  std::vector<Future<int>> pending;
  for (int i = 0; i < 10; ++i) pending.push_back(pool.submit([] { return 2; }));
  started.wait();
  std::thread opener([&] {
    std::this_thread::sleep_for(50ms);
    gate.open();
  });
  pool.shutdown(/*wait=*/true, /*cancel_futures=*/true);
  opener.join();
  EXPECT_EQ(running.get(), 1);
  for (auto& f : pending) EXPECT_TRUE(f.cancelled());
}

TEST(ThreadPoolTest, ShutdownWithoutWaitReturnsAtOnce) {
  std::atomic<bool> finished{false};
  test::Gate gate;
  Future<void> f;
  {
    ThreadPoolExecutor pool(1);
    f = pool.submit([&] {
      gate.wait();
      finished = true;
    });
    const auto start = Clock::now();
    pool.shutdown(/*wait=*/false);
    EXPECT_LT(Clock::now() - start, 1s);
    EXPECT_FALSE(finished.load());
    gate.open();
  }  // the destructor joins
  EXPECT_TRUE(finished.load());
  EXPECT_TRUE(f.done());
}

TEST(ThreadPoolTest, DestructorJoinsAndRunsQueuedWork) {
  std::atomic<int> ran{0};
  {
    ThreadPoolExecutor pool(2);
    for (int i = 0; i < 20; ++i) {
      (void)pool.submit([&ran] {
        std::this_thread::sleep_for(1ms);
        ++ran;
      });
    }
  }
  EXPECT_EQ(ran.load(), 20);
}

TEST(ThreadPoolTest, TaskMaySubmitToItsOwnPool) {
  ThreadPoolExecutor pool(2);
  Future<int> outer = pool.submit([&pool] { return pool.submit([] { return 5; }).get() + 1; });
  EXPECT_EQ(outer.get(5s), 6);
}

TEST(ThreadPoolTest, ManyThreadsSubmittingAtOnce) {
  ThreadPoolExecutor pool(4);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 100'000 / kThreads;
  std::atomic<long> total{0};
  std::vector<std::thread> submitters;
  std::vector<std::vector<Future<int>>> futures(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        futures[t].push_back(pool.submit([&total, i] {
          total.fetch_add(i, std::memory_order_relaxed);
          return i;
        }));
      }
    });
  }
  for (auto& s : submitters) s.join();
  long sum = 0;
  for (auto& fs : futures) {
    for (auto& f : fs) sum += f.get();
  }
  const long expected = static_cast<long>(kThreads) * (kPerThread - 1) * kPerThread / 2;
  EXPECT_EQ(sum, expected);
  EXPECT_EQ(total.load(), expected);
}

// Workers that went to sleep must always be woken by the next submit: alternate bursts
// with pauses long enough for them to fall asleep, and bound every wait.
TEST(ThreadPoolTest, NoLostWakeUps) {
  ThreadPoolExecutor pool(2);
  for (int round = 0; round < 300; ++round) {
    std::vector<Future<int>> fs;
    for (int i = 0; i < round % 7 + 1; ++i) fs.push_back(pool.submit([i] { return i; }));
    for (auto& f : fs) ASSERT_TRUE(f.wait_for(5s)) << "round " << round;
    if (round % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(round * 7));
  }
}

TEST(ThreadPoolTest, TaskThatShutsDownItsOwnPoolDoesNotDeadlock) {
  std::atomic<bool> returned{false};
  {
    ThreadPoolExecutor pool(2);
    pool.submit([&] {
          pool.shutdown(/*wait=*/true);  // a worker cannot wait for itself: returns at once
          returned = true;
        })
        .get(5s);
  }
  EXPECT_TRUE(returned.load());
}

TEST(ThreadPoolTest, RunsInSubmissionOrderEvenPastTheRingCapacity) {
  ThreadPoolExecutor pool(1);
  test::Gate gate;
  Future<void> blocker = pool.submit([&gate] { gate.wait(); });
  std::vector<int> order;
  std::vector<Future<void>> fs;
  for (int i = 0; i < 5000; ++i) fs.push_back(pool.submit([&order, i] { order.push_back(i); }));
  gate.open();
  for (auto& f : fs) f.get();
  std::vector<int> want(5000);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(order, want);
}

TEST(ThreadPoolTest, GetOnATemporaryReturnsAValue) {
  ThreadPoolExecutor pool(1);
  int sum = 0;
  for (int x : pool.submit([] { return std::vector<int>{1, 2, 3}; }).get()) sum += x;
  EXPECT_EQ(sum, 6);
}

TEST(ThreadPoolTest, ShutdownRacingSubmitsWithSleepingWorkers) {
  for (int round = 0; round < 30; ++round) {
    ThreadPoolExecutor pool(4);
    std::vector<Future<int>> warm;
    for (int i = 0; i < 8; ++i) warm.push_back(pool.submit([i] { return i; }));
    for (auto& f : warm) f.get();
    std::this_thread::sleep_for(2ms);  // let the workers fall asleep
    std::vector<Future<int>> accepted;
    std::thread submitter([&] {
      for (int i = 0; i < 50; ++i) {
        try {
          accepted.push_back(pool.submit([i] { return i; }));
        } catch (const ExecutorShutdown&) {
          break;
        }
      }
    });
    pool.shutdown(/*wait=*/true);  // must return: no worker may be left asleep
    submitter.join();
    for (auto& f : accepted) EXPECT_TRUE(f.wait_for(5s));
  }
}

TEST(ThreadPoolTest, SubmitRacingShutdownNeverStrandsATask) {
  for (int round = 0; round < 50; ++round) {
    ThreadPoolExecutor pool(2);
    std::vector<Future<int>> accepted;
    std::thread submitter([&] {
      for (int i = 0; i < 200; ++i) {
        try {
          accepted.push_back(pool.submit([i] { return i; }));
        } catch (const ExecutorShutdown&) {
          break;
        }
      }
    });
    pool.shutdown(/*wait=*/true);
    submitter.join();
    for (auto& f : accepted) EXPECT_TRUE(f.wait_for(5s));
  }
}

TEST(MapTest, ResultsComeInInputOrder) {
  ThreadPoolExecutor pool(4);
  std::vector<int> in(1000);
  std::iota(in.begin(), in.end(), 0);
  for (std::size_t chunk : {1u, 7u, 1000u, 5000u}) {
    auto results = pool.map([](int x) { return x * 2; }, in, {.chunksize = chunk});
    ASSERT_EQ(results.size(), in.size());
    std::size_t i = 0;
    for (int r : results) EXPECT_EQ(r, 2 * in[i++]);
    EXPECT_EQ(i, in.size());
  }
}

TEST(MapTest, EmptyInput) {
  ThreadPoolExecutor pool(1);
  auto results = pool.map([](int x) { return x; }, std::vector<int>{});
  EXPECT_EQ(results.begin(), results.end());
  EXPECT_TRUE(results.to_vector().empty());
}

TEST(MapTest, FirstFailureIsRethrownWhenReached) {
  ThreadPoolExecutor pool(2);
  std::vector<int> in{0, 1, 2, 3, 4, 5, 6};
  for (std::size_t chunk : {1u, 3u}) {
    auto results = pool.map(
        [](int x) {
          if (x == 4 || x == 6) throw std::domain_error("bad " + std::to_string(x));
          return x;
        },
        in, {.chunksize = chunk});
    std::vector<int> got;
    try {
      for (int r : results) got.push_back(r);
      FAIL() << "expected an exception";
    } catch (const std::domain_error& e) {
      EXPECT_STREQ(e.what(), "bad 4");
    }
    EXPECT_THAT(got, testing::ElementsAre(0, 1, 2, 3));
  }
}

TEST(MapTest, TimeoutThrowsWhenReached) {
  ThreadPoolExecutor pool(1);
  test::Gate gate;
  auto results = pool.map(
      [&gate](int x) {
        gate.wait();
        return x;
      },
      std::vector<int>{1, 2}, {.timeout = 50ms});
  EXPECT_THROW((void)results.at(0), TimeoutError);
  gate.open();
}

TEST(MapTest, RejectsZeroChunksize) {
  ThreadPoolExecutor pool(1);
  EXPECT_THROW((void)pool.map([](int x) { return x; }, std::vector<int>{1}, {.chunksize = 0}),
               InvalidArgument);
}

}  // namespace
}  // namespace weft
