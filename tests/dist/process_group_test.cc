// ProcessGroup behaviour beyond the values: async ordering, subgroups, point to point,
// argument checks, timeouts and failure propagation, and every algorithm against the naive
// gather-reduce-broadcast reference.
#include "weft/dist/process_group.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "weft/dist.h"
#include "weft/dist/algorithms/collectives.h"
#include "weft/dist/threads/thread_transport.h"

namespace weft::dist {
namespace {

using namespace std::chrono_literals;
using testing::HasSubstr;

TEST(ProcessGroupTest, RankSizeAndBackend) {
  std::atomic<int> ranks_sum{0};
  run_threads(3, [&](ProcessGroup& pg) {
    EXPECT_EQ(pg.size(), 3);
    EXPECT_EQ(pg.backend_name(), "thread");
    EXPECT_EQ(pg.name(), "world");
    ranks_sum += pg.rank();
  });
  EXPECT_EQ(ranks_sum.load(), 3);
}

TEST(ProcessGroupTest, SeveralAsyncOpsCompleteInIssueOrder) {
  run_threads(4, [](ProcessGroup& pg) {
    std::vector<std::vector<int>> bufs(20, std::vector<int>(100, pg.rank()));
    std::vector<std::shared_ptr<Work>> works;
    for (auto& b : bufs) works.push_back(pg.all_reduce_async(b, ReduceOp::kSum));
    // Completion in issue order: once the last is done, all earlier ones are.
    works.back()->wait();
    for (auto& w : works) EXPECT_TRUE(w->is_completed());
    for (auto& b : bufs) EXPECT_THAT(b, testing::Each(0 + 1 + 2 + 3));
    EXPECT_EQ(works[0]->exception(), nullptr);
  });
}

// A blocking call on an idle group runs on the caller's thread; an operation issued by
// another thread meanwhile must still run after it, in issue order, on every rank.
TEST(ProcessGroupTest, OperationIssuedDuringAnInlineCallWaitsForIt) {
  run_threads(2, [](ProcessGroup& pg) {
    std::vector<int> first(1000, 1);
    std::vector<int> second(1000, pg.rank() + 1);
    std::shared_ptr<Work> later;
    // Both ranks issue the blocking call first and the async one second. Rank 0 issues the
    // second while its blocking call is still waiting for rank 1 (which joins at 150 ms).
    std::thread other([&] {
      std::this_thread::sleep_for(pg.rank() == 0 ? 50ms : 250ms);
      later = pg.all_reduce_async(second, ReduceOp::kMax);
    });
    if (pg.rank() == 1) std::this_thread::sleep_for(150ms);
    pg.all_reduce(first, ReduceOp::kSum);
    other.join();
    later->wait();
    EXPECT_THAT(first, testing::Each(2));
    EXPECT_THAT(second, testing::Each(2));
  });
}

TEST(ProcessGroupTest, SendRecvAndRecvAny) {
  run_threads(3, [](ProcessGroup& pg) {
    if (pg.rank() == 0) {
      std::vector<double> a(5);
      std::vector<double> b(5);
      pg.recv(a, 1, /*tag=*/7);
      pg.recv(b, 1, /*tag=*/8);
      EXPECT_THAT(a, testing::Each(7.0));
      EXPECT_THAT(b, testing::Each(8.0));
      std::set<int> sources;
      std::vector<int> any(1);
      const int src = pg.recv_any(any, /*tag=*/9);
      EXPECT_EQ(any[0], 100 + src);  // the message really came from `src`
      sources.insert(src);
      std::vector<int> any2(1);
      auto work = pg.recv_any_async(any2, /*tag=*/9);
      work->wait();
      EXPECT_EQ(any2[0], 100 + work->source_rank());
      sources.insert(work->source_rank());
      EXPECT_EQ(sources, (std::set<int>{1, 2}));
    } else {
      if (pg.rank() == 1) {
        std::vector<double> b(5, 8.0);
        std::vector<double> a(5, 7.0);
        pg.send(b, 0, 8);  // sent first, received second: matched by tag
        pg.send(a, 0, 7);
      }
      std::vector<int> any{100 + pg.rank()};
      pg.send(any, 0, 9);
    }
  });
}

// CallerWaits: an _async operation on an idle lane runs on the caller's thread (done when
// the call returns); one issued behind unfinished work still runs after it, in order.
TEST(ProcessGroupTest, AnOperationItsCallerWaitsForRunsOnTheCallersThread) {
  run_threads(2, [](ProcessGroup& pg) {
    std::vector<float> v{1.0f};
    {
      const ProcessGroup::CallerWaits here(&pg);
      auto work = pg.all_reduce_async(v);
      EXPECT_TRUE(work->is_completed());
    }
    EXPECT_EQ(v[0], 2.0f);
    std::vector<int> got(1, -1);
    std::vector<int> mine{pg.rank()};
    const int peer = 1 - pg.rank();
    auto first = pg.all_reduce_async(v);  // may still run when the next is issued
    std::shared_ptr<Work> second;
    {
      const ProcessGroup::CallerWaits here(&pg);
      second = pg.all_reduce_async(v);
      if (pg.rank() == 0) {
        pg.send_async(mine, peer)->wait();
      } else {
        EXPECT_TRUE(pg.recv_async(got, peer)->is_completed());  // a lane of its own, idle
      }
    }
    second->wait();
    EXPECT_TRUE(first->is_completed());
    EXPECT_EQ(v[0], 8.0f);
    if (pg.rank() == 1) {
      EXPECT_EQ(got[0], 0);
    }
  });
}

// Every rank posts its receive before its send, and a collective between: the receive must
// hold up neither the send behind it nor the collective (per-peer lanes), or the ring
// deadlocks until the timeout.
TEST(ProcessGroupTest, AReceiveWaitingForItsMessageHoldsUpNothingElse) {
  run_threads(3, [](ProcessGroup& pg) {
    pg.set_timeout(Seconds(5));
    const int n = pg.size();
    const int right = (pg.rank() + 1) % n;
    const int left = (pg.rank() + n - 1) % n;
    std::vector<int> got(2, -1);
    std::vector<int> mine(2, pg.rank());
    auto recv = pg.recv_async(got, left, /*tag=*/3);
    std::vector<float> sum{1.0f};
    pg.all_reduce(sum);
    auto send = pg.send_async(mine, right, /*tag=*/3);
    recv->wait();
    send->wait();
    EXPECT_THAT(got, testing::Each(left));
    EXPECT_EQ(sum[0], static_cast<float>(n));
    // Two receives from one peer still match its sends in order.
    std::vector<int> first(1);
    std::vector<int> second(1);
    auto r1 = pg.recv_async(first, left, 4);
    auto r2 = pg.recv_async(second, left, 4);
    std::vector<int> one{10};
    std::vector<int> two{20};
    pg.send(one, right, 4);
    pg.send(two, right, 4);
    r1->wait();
    r2->wait();
    EXPECT_EQ(first[0], 10);
    EXPECT_EQ(second[0], 20);
  });
}

TEST(ProcessGroupTest, AllGatherVAndAllToAllV) {
  run_threads(4, [](ProcessGroup& pg) {
    const int r = pg.rank();
    const std::vector<std::size_t> counts{0, 1, 3, 2};
    std::vector<int> in(counts[static_cast<std::size_t>(r)], r);
    std::vector<int> out(6);
    pg.all_gather_v(out, in, counts);
    EXPECT_THAT(out, testing::ElementsAre(1, 2, 2, 2, 3, 3));

    // Rank r sends j + 1 copies of r to rank j: receives (r + 1) copies from each rank.
    std::vector<std::size_t> in_counts{1, 2, 3, 4};
    std::vector<std::size_t> out_counts(4, static_cast<std::size_t>(r + 1));
    std::vector<int> send(10, r);
    std::vector<int> recv(static_cast<std::size_t>(4 * (r + 1)));
    pg.all_to_all_v(recv, out_counts, send, in_counts);
    std::vector<int> want;
    for (int k = 0; k < 4; ++k) want.insert(want.end(), static_cast<std::size_t>(r + 1), k);
    EXPECT_EQ(recv, want);
  });
}

TEST(ProcessGroupTest, BarrierHoldsEveryoneUntilAllArrive) {
  std::atomic<int> arrived{0};
  run_threads(5, [&](ProcessGroup& pg) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10 * pg.rank()));
    ++arrived;
    pg.barrier();
    EXPECT_EQ(arrived.load(), 5);
  });
}

TEST(ProcessGroupTest, TwoSubgroupsWorkAtOnce) {
  run_threads(4, [](ProcessGroup& pg) {
    auto evens = pg.new_group({0, 2});
    auto odds = pg.new_group({1, 3});
    auto mine = pg.rank() % 2 == 0 ? evens : odds;
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ((pg.rank() % 2 == 0 ? odds : evens), nullptr);
    EXPECT_EQ(mine->size(), 2);
    EXPECT_EQ(mine->rank(), pg.rank() / 2);
    std::vector<int> v(1000, pg.rank());
    auto sub_work = mine->all_reduce_async(v, ReduceOp::kSum);
    std::vector<int> w(10, 1);
    pg.all_reduce(w, ReduceOp::kSum);  // the parent, concurrently
    sub_work->wait();
    EXPECT_THAT(v, testing::Each(pg.rank() % 2 == 0 ? 0 + 2 : 1 + 3));
    EXPECT_THAT(w, testing::Each(4));
  });
}

TEST(ProcessGroupTest, SplitByColorOrderedByKey) {
  run_threads(6, [](ProcessGroup& pg) {
    const int color = pg.rank() % 3 == 0 ? -1 : pg.rank() % 2;
    auto sub = pg.split(color, /*key=*/-pg.rank());
    if (color < 0) {
      EXPECT_EQ(sub, nullptr);
      return;
    }
    ASSERT_NE(sub, nullptr);
    // color 0: ranks 2, 4 -> by key (-rank): 4, 2. color 1: ranks 1, 5 -> 5, 1.
    EXPECT_EQ(sub->size(), 2);
    std::vector<int> who{pg.rank()};
    std::vector<int> all(2);
    sub->all_gather(all, who);
    EXPECT_EQ(all, color == 0 ? std::vector<int>({4, 2}) : std::vector<int>({5, 1}));
  });
}

// A split and a later new_group with the same members are different groups: their
// messages must not mix, even when both work at once.
TEST(ProcessGroupTest, SplitAndNewGroupOfTheSameRanksStayApart) {
  run_threads(4, [](ProcessGroup& pg) {
    auto halves = pg.split(pg.rank() < 2 ? 0 : 1);
    auto upper = pg.new_group({2, 3});
    if (pg.rank() < 2) return;
    std::vector<int> a(4000, 1);
    std::vector<int> b(4000, 10);
    auto wa = halves->all_reduce_async(a, ReduceOp::kSum);
    auto wb = upper->all_reduce_async(b, ReduceOp::kSum);
    wa->wait();
    wb->wait();
    EXPECT_THAT(a, testing::Each(2));
    EXPECT_THAT(b, testing::Each(20));
  });
}

// A rank that fails with an operation still queued: the operation never runs on its freed
// buffer, and the others are told at once instead of waiting for their timeout.
TEST(ProcessGroupTest, GroupDestroyedWithQueuedWorkAbortsPeers) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(run_threads(3,
                           [](ProcessGroup& pg) {
                             std::vector<int> v(10, 1);
                             if (pg.rank() == 1) {
                               pg.barrier_async();
                               pg.all_reduce_async(v);  // queued behind it, never waited for
                               throw std::runtime_error("rank 1 gives up");
                             }
                             pg.all_reduce(v);
                             pg.all_reduce(v);
                           }),
               std::runtime_error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(ProcessGroupTest, InvalidArgumentsThrowBeforeCommunicating) {
  run_threads(2, [](ProcessGroup& pg) {
    std::vector<float> f(4);
    std::vector<float> f8(8);
    std::vector<int> i4(4);
    try {
      pg.broadcast(f, 2);
      ADD_FAILURE() << "expected InvalidArgument";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("root 2"));
    }
    EXPECT_THROW(pg.all_reduce(f, ReduceOp::kBXor), InvalidArgument);
    try {
      pg.all_gather(f, f);
      ADD_FAILURE() << "expected InvalidArgument";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("4 elements, expected 8"));
    }
    EXPECT_THROW(pg.all_gather(f8, i4), InvalidArgument);  // dtype mismatch
    std::vector<float> other(4);
    try {
      pg.all_gather(std::vector<Buffer>{Buffer(f)}, f);  // one buffer, two ranks
      ADD_FAILURE() << "expected InvalidArgument";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("outs has 1 elements, expected 2"));
    }
    try {
      pg.all_gather({Buffer(f8), Buffer(other)}, f);
      ADD_FAILURE() << "expected InvalidArgument";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("outs[0] has 8 elements, expected 4"));
    }
    EXPECT_THROW(pg.all_gather({Buffer(i4), Buffer(other)}, f), InvalidArgument);  // dtype
    EXPECT_THROW(pg.reduce_scatter(f, f), InvalidArgument);
    std::vector<float> three(3);
    EXPECT_THROW(pg.all_to_all(three, three), InvalidArgument);
    EXPECT_THROW(pg.send(f, 0, -1), InvalidArgument);
    // The group is still usable.
    pg.all_reduce(f8);
  });
}

// Rank 2 never joins. The rank that waits on it directly names it; a rank that waits on a
// rank that waits (here, for the broadcast half) names that rank or reports the first
// rank's failure. Every waiting rank fails within the timeout plus 2 s.
TEST(ProcessGroupTest, MissingRankTimesOutNamingIt) {
  std::mutex mu;
  std::vector<std::string> errors;
  const auto start = std::chrono::steady_clock::now();
  run_threads(3, [&](ProcessGroup& pg) {
    std::vector<float> v(10, 1.0f);
    if (pg.rank() == 2) return;  // never joins
    try {
      pg.all_reduce(v, ReduceOp::kSum, {.timeout = 1s});
      ADD_FAILURE() << "rank " << pg.rank() << " should have failed";
    } catch (const TimeoutError& e) {
      std::lock_guard lock(mu);
      errors.push_back(e.what());
    } catch (const PeerError& e) {
      std::lock_guard lock(mu);
      errors.push_back(e.what());
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1s + 2s);
  });
  ASSERT_EQ(errors.size(), 2u);
  const std::string all = errors[0] + "\n" + errors[1];
  EXPECT_THAT(all, HasSubstr("dist::all_reduce #0 on group 'world'"));
  EXPECT_THAT(all, HasSubstr("rank 2 had not arrived"));
}

// In a subgroup the errors name ranks by their place in the group and by their global rank
// (the numbers weftrun's lines and the world's errors use).
TEST(ProcessGroupTest, SubgroupTimeoutNamesGlobalRanks) {
  run_threads(3, [](ProcessGroup& pg) {
    auto upper = pg.new_group({1, 2});
    if (pg.rank() != 1) return;  // global rank 2 never joins the subgroup's all-reduce
    std::vector<float> v(4, 1.0f);
    try {
      upper->all_reduce(v, ReduceOp::kSum, {.timeout = 0.5s});
      ADD_FAILURE() << "should have timed out";
    } catch (const TimeoutError& e) {
      EXPECT_THAT(e.what(), HasSubstr("rank 0 (global rank 1) of 2"));
      EXPECT_THAT(e.what(), HasSubstr("rank 1 (global rank 2) had not arrived"));
    }
  });
}

TEST(ProcessGroupTest, BrokenGroupSaysSoOnEveryLaterCall) {
  run_threads(2, [](ProcessGroup& pg) {
    std::vector<int> v(1);
    if (pg.rank() == 0) {
      EXPECT_THROW(pg.all_reduce(v, ReduceOp::kSum, {.timeout = 0.2s}), TimeoutError);
    } else {
      std::this_thread::sleep_for(0.5s);
    }
    try {
      pg.all_reduce(v);
      ADD_FAILURE() << "expected GroupBroken";
    } catch (const GroupBroken& e) {
      EXPECT_THAT(e.what(), HasSubstr("unusable"));
    } catch (const PeerError&) {
      // rank 1 may see the abort first; either way it does not hang
    }
  });
}

TEST(ProcessGroupTest, AbortFromAnotherThreadEndsABlockedCall) {
  run_threads(2, [](ProcessGroup& pg) {
    std::vector<int> v(1);
    if (pg.rank() == 0) {
      std::thread interrupter([&pg] {
        std::this_thread::sleep_for(0.2s);
        pg.abort("interrupted by the test");
      });
      const auto start = std::chrono::steady_clock::now();
      EXPECT_THROW(pg.all_reduce(v), weft::Error);  // rank 1 never joins this one
      EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
      interrupter.join();
      EXPECT_THROW(pg.barrier(), GroupBroken);
    } else {
      std::this_thread::sleep_for(0.5s);
      EXPECT_THAT([&] { pg.all_reduce(v); },
                  testing::ThrowsMessage<PeerError>(HasSubstr("interrupted by the test")));
    }
  });
}

TEST(ProcessGroupTest, FailingRankUnblocksTheOthersAndIsRethrown) {
  const auto start = std::chrono::steady_clock::now();
  try {
    run_threads(4, [](ProcessGroup& pg) {
      if (pg.rank() == 1) throw std::out_of_range("rank 1 gave up");
      std::vector<int> v(5);
      pg.all_reduce(v);  // would wait 300 s for rank 1 without the abort
    });
    FAIL() << "expected the rank's exception";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "rank 1 gave up");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

// Runs `fn(transport, members, rank)` on n threads over one ThreadHub: the algorithms
// alone, without ProcessGroup.
void on_thread_transports(int n,
                          const std::function<void(Transport&, const std::vector<int>&, int)>& fn) {
  auto hub = std::make_shared<ThreadHub>(n);
  std::vector<int> members(static_cast<std::size_t>(n));
  std::iota(members.begin(), members.end(), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ThreadTransport t(hub, r);
      fn(t, members, r);
    });
  }
  for (auto& th : threads) th.join();
}

// The all-reduce algorithms against gather-reduce-broadcast, on random integers (exact, so
// the comparison is bitwise), at sizes on both sides of the generic engine's threshold.
TEST(AlgorithmsTest, AllReduceMatchesReference) {
  for (int n : {2, 3, 4, 5, 6, 7, 8}) {
    on_thread_transports(n, [n](Transport& t, const std::vector<int>& members, int r) {
      std::mt19937 rng(static_cast<unsigned>(r + 1));
      // 700,001: 2.8 MB, whose ring blocks go in pieces on 2 and 3 ranks.
      for (std::size_t count : {1u, 13u, 16'383u, 16'384u, 50'001u, 700'001u}) {
        std::vector<std::int32_t> a(count);
        for (auto& x : a) x = static_cast<std::int32_t>(rng() % 1000);
        std::vector<std::int32_t> ring = a, tree = a, doubling = a;
        const Deadline d = Deadline::after(Seconds(30));
        algorithms::all_reduce_ring(Comm{t, members, r, Tag{1} << 32, d}, Buffer(ring),
                                    ReduceOp::kSum);
        algorithms::all_reduce_reduce_broadcast(Comm{t, members, r, Tag{3} << 32, d}, Buffer(tree),
                                                ReduceOp::kSum);
        algorithms::all_reduce_recursive_doubling(Comm{t, members, r, Tag{4} << 32, d},
                                                  Buffer(doubling), ReduceOp::kSum);
        algorithms::reference_all_reduce(Comm{t, members, r, Tag{2} << 32, d}, Buffer(a),
                                         ReduceOp::kSum);
        EXPECT_EQ(ring, a) << "ring, n " << n << " count " << count;
        EXPECT_EQ(doubling, a) << "recursive doubling, n " << n << " count " << count;
        EXPECT_EQ(tree, a) << "reduce + broadcast, n " << n << " count " << count;
      }
    });
  }
}

// A transport over another that counts the messages it sends and says whether its ranks
// share CPUs (where they do, the rings move whole blocks rather than pieces).
class Counting final : public Transport {
 public:
  Counting(Transport& inner, bool share_cpus) : inner_(inner), share_cpus_(share_cpus) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void send(int peer, Tag tag, std::span<const std::byte> bytes, const Deadline& d) override {
    ++messages;
    inner_.send(peer, tag, bytes, d);
  }
  void recv(int peer, Tag tag, std::span<std::byte> out, const Deadline& d) override {
    inner_.recv(peer, tag, out, d);
  }
  int recv_any(Tag tag, std::span<std::byte> out, const Deadline& d) override {
    return inner_.recv_any(tag, out, d);
  }
  void abort(const std::string& reason) override { inner_.abort(reason); }
  bool ranks_share_cpus() const override { return share_cpus_; }
  int messages = 0;

 private:
  Transport& inner_;
  bool share_cpus_;
};

// The ring all-reduce of 2.8 MB on 2 ranks: in 1 MiB pieces (2 a block, 4 messages a rank),
// or, where ranks share CPUs, in whole blocks (2 messages); the same sums either way.
TEST(AlgorithmsTest, RingMovesPiecesUnlessRanksShareCpus) {
  on_thread_transports(2, [](Transport& t, const std::vector<int>& members, int r) {
    std::mt19937 rng(static_cast<unsigned>(r + 3));
    std::vector<std::int32_t> a(700'001);
    for (auto& x : a) x = static_cast<std::int32_t>(rng() % 1000);
    std::vector<std::int32_t> pieces = a, whole = a;
    const Deadline d = Deadline::after(Seconds(30));
    Counting own_cpus(t, false), sharing(t, true);
    algorithms::all_reduce_ring(Comm{own_cpus, members, r, Tag{1} << 32, d}, Buffer(pieces),
                                ReduceOp::kSum);
    algorithms::all_reduce_ring(Comm{sharing, members, r, Tag{2} << 32, d}, Buffer(whole),
                                ReduceOp::kSum);
    algorithms::reference_all_reduce(Comm{t, members, r, Tag{3} << 32, d}, Buffer(a),
                                     ReduceOp::kSum);
    EXPECT_EQ(pieces, a);
    EXPECT_EQ(whole, a);
    EXPECT_EQ(own_cpus.messages, 4);
    EXPECT_EQ(sharing.messages, 2);
  });
}

// Recursive doubling on floats, whose sums depend on their order: every rank must still end
// with the same bits (each evaluates the same expression).
TEST(AlgorithmsTest, RecursiveDoublingAgreesBitwiseOnFloats) {
  for (int n : {2, 3, 5, 6, 8}) {
    std::vector<std::vector<float>> results(static_cast<std::size_t>(n));
    on_thread_transports(n, [&](Transport& t, const std::vector<int>& members, int r) {
      std::mt19937 rng(static_cast<unsigned>(r + 11));
      std::uniform_real_distribution<float> dist(-1e4f, 1e4f);
      std::vector<float> x(257);
      for (auto& v : x) v = dist(rng) * (rng() % 2 ? 1e-4f : 1.0f);
      algorithms::all_reduce_recursive_doubling(
          Comm{t, members, r, Tag{5} << 32, Deadline::after(Seconds(30))}, Buffer(x),
          ReduceOp::kSum);
      results[static_cast<std::size_t>(r)] = std::move(x);
    });
    for (int r = 1; r < n; ++r) {
      EXPECT_EQ(std::memcmp(results[0].data(), results[static_cast<std::size_t>(r)].data(),
                            results[0].size() * sizeof(float)),
                0)
          << "rank " << r << " of " << n;
    }
  }
}

// Reduce-scatter (ring), all-gather (ring) and broadcast (binomial) against their naive
// forms built on the reference all-reduce: random integers, bitwise, roots other than 0.
TEST(AlgorithmsTest, RingAndTreeAlgorithmsMatchNaiveForms) {
  for (int n : {1, 2, 3, 6}) {
    on_thread_transports(n, [n](Transport& t, const std::vector<int>& members, int r) {
      const Deadline d = Deadline::after(Seconds(30));
      Tag tag = Tag{1} << 32;
      const auto comm = [&] { return Comm{t, members, r, tag += 4096, d}; };
      std::mt19937 rng(static_cast<unsigned>(r + 7));
      // 70,001 int64s: blocks of 560 KB, over a tcp frame's 512 KiB; 140,003: 1.1 MB, which
      // the reduce-scatter moves in two pieces of different sizes.
      for (std::size_t block : {0u, 1u, 5u, 3000u, 70'001u, 140'003u}) {
        const auto un = static_cast<std::size_t>(n);
        std::vector<std::int64_t> in(block * un);
        for (auto& x : in) x = static_cast<std::int64_t>(rng() % 100);
        // reduce_scatter == my block of all_reduce(in)
        std::vector<std::int64_t> rs(block);
        algorithms::reduce_scatter(comm(), Buffer(rs), Buffer(in), ReduceOp::kSum);
        std::vector<std::int64_t> full = in;
        algorithms::reference_all_reduce(comm(), Buffer(full), ReduceOp::kSum);
        EXPECT_TRUE(
            std::equal(rs.begin(), rs.end(),
                       full.begin() + static_cast<long>(block * static_cast<std::size_t>(r))));
        // the ring all-reduce, on blocks that differ by one element
        std::vector<std::int64_t> ring = in;
        ring.insert(ring.end(), {3, 1, 4});
        std::vector<std::int64_t> ring_want = ring;
        algorithms::all_reduce_ring(comm(), Buffer(ring), ReduceOp::kSum);
        algorithms::reference_all_reduce(comm(), Buffer(ring_want), ReduceOp::kSum);
        EXPECT_EQ(ring, ring_want) << "n " << n << " block " << block;
        // all_gather == all_reduce of a buffer that is zero outside my block
        std::vector<std::int64_t> mine(in.begin(), in.begin() + static_cast<long>(block));
        std::vector<std::int64_t> gathered(block * un);
        algorithms::all_gather_v(comm(), Buffer(gathered), Buffer(mine),
                                 std::vector<std::size_t>(un, block));
        std::vector<std::int64_t> sparse(block * un, 0);
        std::copy(mine.begin(), mine.end(),
                  sparse.begin() + static_cast<long>(block * static_cast<std::size_t>(r)));
        algorithms::reference_all_reduce(comm(), Buffer(sparse), ReduceOp::kSum);
        EXPECT_EQ(gathered, sparse);
        // broadcast from the last rank == all_reduce of a buffer only the root fills
        const int root = n - 1;
        std::vector<std::int64_t> b = r == root ? mine : std::vector<std::int64_t>(block, 0);
        std::vector<std::int64_t> want = b;
        algorithms::broadcast(comm(), Buffer(b), root);
        algorithms::reference_all_reduce(comm(), Buffer(want), ReduceOp::kSum);
        EXPECT_EQ(b, want) << "n " << n << " block " << block;
      }
    });
  }
}

}  // namespace
}  // namespace weft::dist
