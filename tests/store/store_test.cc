// The Store contract, run against every implementation: HashStore, PrefixStore over a
// HashStore, FileStore on a temporary file and TCPStore (server and clients in this process,
// on port 0).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"
#include "weft/base/error.h"
#include "weft/store/file_store.h"
#include "weft/store/hash_store.h"
#include "weft/store/prefix_store.h"
#include "weft/store/tcp_store.h"

namespace weft::store {
namespace {

using namespace std::chrono_literals;
using testing::HasSubstr;
using testing::Not;

// One store under test, and a way to open more handles on the same data: another client of
// the same server, another FileStore on the same file. `keep` holds what they need.
struct World {
  std::shared_ptr<Store> store;
  std::function<std::shared_ptr<Store>()> another;
  std::shared_ptr<void> keep;
};

struct Kind {
  std::string name;
  std::function<World()> make;
};

void PrintTo(const Kind& kind, std::ostream* os) { *os << kind.name; }

World hash_world() {
  auto s = std::make_shared<HashStore>();
  return {s, [s] { return s; }, nullptr};
}

World prefix_world() {
  auto base = std::make_shared<HashStore>();
  return {std::make_shared<PrefixStore>("job", base),
          [base] { return std::make_shared<PrefixStore>("job", base); }, base};
}

World file_world() {
  auto dir = std::make_shared<test::TempDir>("weft-store-test");
  const std::string path = dir->file("store");
  return {std::make_shared<FileStore>(path), [path] { return std::make_shared<FileStore>(path); },
          dir};
}

World tcp_world() {
  auto server = std::make_shared<TCPStore>(TCPStoreOptions{.is_server = true, .token = "t"});
  const int port = server->port();
  return {
      server,
      [port] { return std::make_shared<TCPStore>(TCPStoreOptions{.port = port, .token = "t"}); },
      server};
}

class StoreTest : public testing::TestWithParam<Kind> {
 protected:
  void SetUp() override { world_ = GetParam().make(); }
  Store& store() { return *world_.store; }
  std::shared_ptr<Store> another() { return world_.another(); }

  World world_;
};

TEST_P(StoreTest, SetThenGet) {
  store().set("a", "1");
  EXPECT_EQ(store().get("a"), "1");
  store().set("a", "2");
  EXPECT_EQ(store().get("a"), "2");
  const std::string binary("\0x\xff\0", 4);
  store().set("bin", binary);
  EXPECT_EQ(store().get("bin"), binary);
  store().set("empty", "");
  EXPECT_EQ(store().get("empty"), "");
  EXPECT_EQ(another()->get("a"), "2");
}

TEST_P(StoreTest, GetBlocksUntilAnotherThreadSets) {
  auto other = another();
  std::thread setter([other] {
    std::this_thread::sleep_for(100ms);
    other->set("late", "here");
  });
  const auto start = Clock::now();
  EXPECT_EQ(store().get("late"), "here");
  EXPECT_GE(Clock::now() - start, 80ms);
  setter.join();
}

TEST_P(StoreTest, GetTimesOutNamingTheKey) {
  store().set_timeout(200ms);
  const auto start = Clock::now();
  try {
    store().get("never-set");
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("never-set'"));  // PrefixStore names 'job/never-set'
  }
  EXPECT_GE(Clock::now() - start, 200ms);
  EXPECT_LT(Clock::now() - start, 1200ms);
}

TEST_P(StoreTest, AddFromEightThreadsCountsEveryAdd) {
  constexpr int kThreads = 8, kAdds = 1000;
  std::vector<std::vector<std::int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, client = another(), t] {
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(client->add("counter", 1));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store().add("counter", 0), kThreads * kAdds);
  // Every add saw a distinct value: no two read the same count.
  std::vector<std::int64_t> all;
  for (const auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  for (int i = 0; i < kThreads * kAdds; ++i) ASSERT_EQ(all[i], i + 1);
}

TEST_P(StoreTest, AddStartsAtZeroAndRejectsText) {
  EXPECT_EQ(store().add("n", 5), 5);
  EXPECT_EQ(store().add("n", -7), -2);
  EXPECT_EQ(store().get("n"), "-2");
  store().set("text", "abc");
  EXPECT_THROW(store().add("text", 1), InvalidArgument);
  EXPECT_EQ(store().get("text"), "abc");
  EXPECT_EQ(store().add("n", 2), 0);  // still usable after the error
}

TEST_P(StoreTest, CompareSetFollowsTorch) {
  // Absent key, empty expected: set.
  EXPECT_EQ(store().compare_set("k", "", "v1"), "v1");
  EXPECT_EQ(store().get("k"), "v1");
  // Present and equal: set.
  EXPECT_EQ(store().compare_set("k", "v1", "v2"), "v2");
  // Present and different: unchanged, the current value returned.
  EXPECT_EQ(store().compare_set("k", "nope", "v3"), "v2");
  EXPECT_EQ(store().get("k"), "v2");
  // Absent key, non-empty expected: stays absent, `expected` returned (as torch).
  EXPECT_EQ(store().compare_set("absent", "x", "y"), "x");
  EXPECT_FALSE(store().check({"absent"}));
}

TEST_P(StoreTest, WaitForSeveralKeys) {
  auto other = another();
  std::thread setter([other] {
    std::this_thread::sleep_for(50ms);
    other->set("w1", "1");
    std::this_thread::sleep_for(50ms);
    other->set("w2", "2");
  });
  store().wait({"w1", "w2"});
  EXPECT_TRUE(store().check({"w1", "w2"}));
  setter.join();
  store().wait({});
}

TEST_P(StoreTest, WaitTimesOutNamingTheMissingKeys) {
  store().set("have", "1");
  const auto start = Clock::now();
  try {
    store().wait({"have", "miss1", "miss2"}, 200ms);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("miss1', '"));
    EXPECT_THAT(e.what(), HasSubstr("miss2'"));
    EXPECT_THAT(e.what(), HasSubstr("2 of 3"));
    EXPECT_THAT(e.what(), Not(HasSubstr("have'")));
  }
  EXPECT_GE(Clock::now() - start, 200ms);
  EXPECT_LT(Clock::now() - start, 1200ms);
  EXPECT_THROW(store().wait({"miss1"}, 0s), TimeoutError);
}

TEST_P(StoreTest, CheckDoesNotWait) {
  EXPECT_TRUE(store().check({}));
  EXPECT_FALSE(store().check({"c"}));
  store().set("c", "");
  EXPECT_TRUE(store().check({"c"}));
  EXPECT_FALSE(store().check({"c", "d"}));
}

TEST_P(StoreTest, DeleteKey) {
  store().set("d", "1");
  EXPECT_TRUE(store().delete_key("d"));
  EXPECT_FALSE(store().delete_key("d"));
  EXPECT_FALSE(store().check({"d"}));
  EXPECT_FALSE(another()->check({"d"}));
  store().set_timeout(50ms);
  EXPECT_THROW(store().get("d"), TimeoutError);
  EXPECT_EQ(store().add("d", 3), 3);  // a deleted counter starts over
}

TEST_P(StoreTest, NumKeys) {
  EXPECT_EQ(store().num_keys(), 0);
  store().set("x", "1");
  store().set("y", "1");
  store().add("z", 1);
  store().set("x", "2");
  EXPECT_EQ(store().num_keys(), 3);
  store().delete_key("y");
  EXPECT_EQ(another()->num_keys(), 2);
}

TEST_P(StoreTest, SameHandleFromManyThreads) {
  // One handle shared by threads: a blocked get must not stall the others' calls.
  std::atomic<int> done{0};
  std::thread getter([&] {
    EXPECT_EQ(store().get("shared"), "ok");
    ++done;
  });
  // (std::to_string(i) + "k": GCC 12's bogus -Wrestrict on "k" + std::string, PR 105329.)
  for (int i = 0; i < 50; ++i) store().set(std::to_string(i) + "k", "v");
  EXPECT_EQ(store().get("49k"), "v");
  store().set("shared", "ok");
  getter.join();
  EXPECT_EQ(done.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest,
                         testing::Values(Kind{"HashStore", hash_world},
                                         Kind{"PrefixStore", prefix_world},
                                         Kind{"FileStore", file_world},
                                         Kind{"TCPStore", tcp_world}),
                         [](const testing::TestParamInfo<Kind>& p) { return p.param.name; });

TEST(PrefixStoreTest, PrefixesKeepKeysApart) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base), b("b", base);
  a.set("k", "from a");
  b.set("k", "from b");
  EXPECT_EQ(a.get("k"), "from a");
  EXPECT_EQ(b.get("k"), "from b");
  EXPECT_EQ(base->get("a/k"), "from a");
  EXPECT_EQ(a.num_keys(), 2);  // the underlying store's count, as documented
  PrefixStore nested("inner", std::make_shared<PrefixStore>("outer", base));
  nested.set("k", "deep");
  EXPECT_EQ(base->get("outer/inner/k"), "deep");
}

TEST(PrefixStoreTest, TimeoutIsItsOwnAndNamesThePrefixedKey) {
  auto base = std::make_shared<HashStore>();
  PrefixStore p("job", base);
  EXPECT_EQ(p.timeout(), base->timeout());
  p.set_timeout(100ms);
  try {
    p.get("k");
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'job/k'"));
  }
  EXPECT_THROW(PrefixStore("x", nullptr), InvalidArgument);
}

}  // namespace
}  // namespace weft::store
