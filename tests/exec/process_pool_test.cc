#include "weft/exec/process_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/sanitizers.h"
#include "weft/exec/wait.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::HasSubstr;

int square(int x) { return x * x; }
pid_t my_pid() { return ::getpid(); }
std::string greet(const std::string& name, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += "hi " + name + ";";
  return out;
}
std::vector<double> scale(std::vector<double> v, double k) {
  for (double& x : v) x *= k;
  return v;
}
std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> words;
  std::string word;
  for (char c : s) {
    if (c == ' ') {
      words.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  words.push_back(word);
  return words;
}
int sleep_then(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
int throws_range(int x) {
  if (x == 3) throw std::out_of_range("three is out");
  return x;
}
int die_by_signal(int) {
  ::raise(SIGSEGV);
  return 0;
}
int die_by_exit(int code) { std::exit(code); }
int die_by_abort(int) { std::abort(); }
struct Point {
  double x, y;
};
Point mirror(Point p) { return {p.y, p.x}; }
void no_result(int) {}

TEST(ProcessPoolTest, RunsInOtherProcesses) {
  ProcessPoolExecutor pool(2);
  EXPECT_EQ(pool.max_workers(), 2u);
  EXPECT_EQ(pool.submit(square, 7).get(), 49);
  const pid_t worker = pool.submit(my_pid).get();
  EXPECT_NE(worker, ::getpid());
  const std::vector<pid_t> pids = pool.worker_pids();
  EXPECT_THAT(pids, testing::Contains(worker));
}

TEST(ProcessPoolTest, SerializesStringsVectorsAndStructs) {
  ProcessPoolExecutor pool(2);
  EXPECT_EQ(pool.submit(greet, "ann", 2).get(), "hi ann;hi ann;");
  EXPECT_EQ(pool.submit(scale, std::vector<double>{1, 2.5}, 2.0).get(),
            (std::vector<double>{2, 5}));
  EXPECT_THAT(pool.submit(split_words, std::string("a bb ccc")).get(),
              testing::ElementsAre("a", "bb", "ccc"));
  const Point p = pool.submit(mirror, Point{1, 2}).get();
  EXPECT_EQ(p.x, 2);
  EXPECT_EQ(p.y, 1);
  pool.submit(no_result, 1).get();
  EXPECT_EQ(pool.submit(
                    +[](int a, int b) { return a - b; }, 10, 4)
                .get(),
            6);
  EXPECT_EQ(pool.submit([](int a) { return a + 1; }, 1).get(), 2);
}

TEST(ProcessPoolTest, LargeArgumentsAndResults) {
  ProcessPoolExecutor pool(1);
  std::vector<double> big(3'000'000);
  std::iota(big.begin(), big.end(), 0.0);
  const std::vector<double> out = pool.submit(scale, big, 0.5).get();
  ASSERT_EQ(out.size(), big.size());
  EXPECT_EQ(out.back(), big.back() * 0.5);
}

TEST(ProcessPoolTest, RunsConcurrently) {
  ProcessPoolExecutor pool(4);
  const auto start = Clock::now();
  std::vector<Future<int>> fs;
  for (int i = 0; i < 4; ++i) fs.push_back(pool.submit(sleep_then, 300));
  for (auto& f : fs) EXPECT_EQ(f.get(), 300);
  EXPECT_LT(Clock::now() - start, 1100ms);
}

TEST(ProcessPoolTest, ExceptionBecomesRemoteError) {
  ProcessPoolExecutor pool(1);
  Future<int> f = pool.submit(throws_range, 3);
  try {
    (void)f.get();
    FAIL() << "expected RemoteError";
  } catch (const RemoteError& e) {
    EXPECT_EQ(e.type_name(), "std::out_of_range");
    EXPECT_EQ(e.remote_what(), "three is out");
  }
  EXPECT_EQ(pool.submit(throws_range, 4).get(), 4);  // the worker survives
}

TEST(ProcessPoolTest, WorkerKilledBySignalFailsItsFutureAndIsReplaced) {
  ProcessPoolExecutor pool(1);
  const pid_t before = pool.submit(my_pid).get();
  Future<int> f = pool.submit(die_by_signal, 0);
  try {
    (void)f.get(10s);
    FAIL() << "expected BrokenProcessPool";
  } catch (const BrokenProcessPool& e) {
    // A sanitizer's own SEGV handler turns the signal into an exit code.
    if (!test::kUnderSanitizer) {
      EXPECT_THAT(e.what(), HasSubstr("signal 11"));
    }
  }
  const pid_t after = pool.submit(my_pid).get(10s);
  EXPECT_NE(after, before);
  EXPECT_EQ(pool.submit(square, 3).get(10s), 9);
}

TEST(ProcessPoolTest, WorkerThatExitsOrAbortsFailsItsFuture) {
  ProcessPoolExecutor pool(2);
  try {
    (void)pool.submit(die_by_exit, 3).get(10s);
    FAIL() << "expected BrokenProcessPool";
  } catch (const BrokenProcessPool& e) {
    EXPECT_THAT(e.what(), HasSubstr("exited with code 3"));
  }
  try {
    (void)pool.submit(die_by_abort, 0).get(10s);
    FAIL() << "expected BrokenProcessPool";
  } catch (const BrokenProcessPool& e) {
    if (!test::kUnderSanitizer) {
      EXPECT_THAT(e.what(), HasSubstr("signal 6"));
    }
  }
  EXPECT_EQ(pool.submit(square, 5).get(10s), 25);
}

TEST(ProcessPoolTest, WorkerKilledFromOutsideIsNoticedWithinASecond) {
  ProcessPoolExecutor pool(1);
  Future<int> f = pool.submit(sleep_then, 30'000);
  while (!f.running()) std::this_thread::sleep_for(1ms);
  const pid_t victim = pool.worker_pids().at(0);
  const auto start = Clock::now();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  EXPECT_THROW((void)f.get(5s), BrokenProcessPool);
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_EQ(pool.submit(square, 2).get(10s), 4);
}

TEST(ProcessPoolTest, CancelPendingAndShutdownCancelFutures) {
  ProcessPoolExecutor pool(1);
  Future<int> running = pool.submit(sleep_then, 200);
  while (!running.running()) std::this_thread::sleep_for(1ms);
  std::vector<Future<int>> pending;
  for (int i = 0; i < 5; ++i) pending.push_back(pool.submit(square, i));
  EXPECT_TRUE(pending[0].cancel());
  pool.shutdown(/*wait=*/true, /*cancel_futures=*/true);
  EXPECT_EQ(running.get(), 200);
  for (auto& f : pending) EXPECT_TRUE(f.cancelled());
  EXPECT_THROW((void)pool.submit(square, 1), ExecutorShutdown);
  EXPECT_THAT(pool.worker_pids(), testing::Each(-1));
}

TEST(ProcessPoolTest, ShutdownWaitRunsEverything) {
  std::vector<Future<int>> fs;
  {
    ProcessPoolExecutor pool(2);
    for (int i = 0; i < 50; ++i) fs.push_back(pool.submit(square, i));
  }  // destructor: shutdown(wait = true)
  for (int i = 0; i < 50; ++i) EXPECT_EQ(fs[i].get(0s), i * i);
}

TEST(ProcessPoolTest, WaitAndAsCompletedWork) {
  ProcessPoolExecutor pool(2);
  std::vector<Future<int>> fs{pool.submit(sleep_then, 300), pool.submit(sleep_then, 10)};
  auto first = weft::wait(fs, 10s, ReturnWhen::kFirstCompleted);
  ASSERT_EQ(first.done.size(), 1u);
  EXPECT_TRUE(first.done[0] == fs[1]);
  std::vector<int> order;
  for (auto& f : weft::as_completed(fs, 10s)) order.push_back(f.get());
  EXPECT_THAT(order, testing::ElementsAre(10, 300));
}

TEST(ProcessPoolTest, MapInOrderWithChunks) {
  ProcessPoolExecutor pool(2);
  std::vector<int> in(1000);
  std::iota(in.begin(), in.end(), 0);
  for (std::size_t chunk : {1u, 64u, 5000u}) {
    const std::vector<int> out = pool.map(square, in, {.chunksize = chunk}).to_vector();
    ASSERT_EQ(out.size(), in.size());
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(out[i], i * i);
  }
}

TEST(ProcessPoolTest, MapRethrowsFirstFailureWhenReached) {
  ProcessPoolExecutor pool(2);
  auto results = pool.map(throws_range, std::vector<int>{0, 1, 2, 3, 4}, {.chunksize = 2});
  std::vector<int> got;
  try {
    for (int r : results) got.push_back(r);
    FAIL() << "expected RemoteError";
  } catch (const RemoteError& e) {
    EXPECT_EQ(e.remote_what(), "three is out");
  }
  EXPECT_THAT(got, testing::ElementsAre(0, 1, 2));
}

TEST(ProcessPoolTest, ShutdownIsQuickWithSeveralPoolsAlive) {
  ProcessPoolExecutor other(2);  // its workers must not hold the first pool's sockets
  const auto start = Clock::now();
  {
    ProcessPoolExecutor pool(4);
    EXPECT_EQ(pool.submit(square, 3).get(), 9);
  }
  EXPECT_LT(Clock::now() - start, 900ms);  // no worker waited out its exit grace
  EXPECT_EQ(other.submit(square, 4).get(), 16);
}

TEST(ProcessPoolTest, CancelCallbackMaySubmitAgain) {
  ProcessPoolExecutor pool(1);
  Future<int> running = pool.submit(sleep_then, 100);
  Future<int> pending = pool.submit(square, 2);
  Future<int> resubmitted;
  pending.add_done_callback([&](const Future<int>& f) {
    if (f.cancelled()) {
      try {
        resubmitted = pool.submit(square, 3);
      } catch (const ExecutorShutdown&) {
        // the callback may run during shutdown(cancel_futures): refused, not deadlocked
      }
    }
  });
  pool.shutdown(/*wait=*/true, /*cancel_futures=*/true);
  EXPECT_TRUE(pending.cancelled() || pending.done());
}

TEST(ProcessPoolTest, NoZombiesAfterShutdown) {
  std::vector<pid_t> pids;
  {
    ProcessPoolExecutor pool(3);
    pids = pool.worker_pids();
  }
  for (pid_t pid : pids) {
    EXPECT_EQ(::kill(pid, 0), -1) << "worker " << pid << " still exists";
  }
}

}  // namespace
}  // namespace weft
