// The flight recorder's ring written and read back (fields, labels, wrap-around, concurrent
// writers and a reader), and the diagnosis on rings made up for each finding.
#include "weft/recorder/flight_recorder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "weft/recorder/diagnosis.h"
#include "weft/recorder/ring_reader.h"

namespace weft::recorder {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Ring {
  std::unique_ptr<std::byte[]> bytes{new std::byte[kRingBytes]()};
  FlightRecorder recorder{bytes.get()};
  RingSnapshot read() const { return read_ring(bytes.get(), kRingBytes); }
};

OpInfo all_reduce(std::uint32_t group, std::uint64_t seq, std::uint64_t count = 4) {
  return {.group = group,
          .seq = seq,
          .op = "all_reduce",
          .count = count,
          .dtype = DType::kFloat32,
          .reduce = "sum"};
}

TEST(FlightRecorderTest, RecordsWhatWasIssuedAndHowItEnded) {
  Ring ring;
  ring.recorder.set_rank(3, 4);
  const std::uint32_t world = ring.recorder.add_group(7, "world", 4, 3);
  std::uint64_t a;
  {
    const FlightRecorder::Site site("step 12");
    a = ring.recorder.issued(all_reduce(world, 5));
  }
  ring.recorder.started(a);
  ring.recorder.finished(a, true);
  const std::uint64_t b = ring.recorder.issued(
      {.group = world, .seq = 6, .op = "broadcast", .count = 9, .dtype = DType::kInt32, .root = 2});
  ring.recorder.started(b);
  const RingSnapshot s = ring.read();
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.world_size, 4);
  ASSERT_EQ(s.groups.size(), 1u);
  EXPECT_EQ(s.groups[0].id, 7u);
  EXPECT_EQ(s.groups[0].name, "world");
  ASSERT_EQ(s.records.size(), 2u);
  EXPECT_EQ(s.records[0].call(), "all_reduce(count=4, dtype=float32, op=sum)");
  EXPECT_EQ(s.records[0].state, OpState::kCompleted);
  EXPECT_EQ(s.records[0].site, "step 12");
  EXPECT_GT(s.records[0].ended_ns, 0);
  EXPECT_EQ(s.records[1].call(), "broadcast(count=9, dtype=int32, root=2)");
  EXPECT_EQ(s.records[1].state, OpState::kStarted);
  EXPECT_EQ(s.records[1].site, "");  // the label ended with its scope
  EXPECT_EQ(s.records[1].ended_ns, 0);
}

TEST(FlightRecorderTest, KeepsTheLastRecordsAndNeverWritesWhenDisabled) {
  Ring ring;
  const std::uint32_t g = ring.recorder.add_group(0, "world", 2, 0);
  for (std::uint64_t i = 0; i < kRingRecords + 10; ++i) ring.recorder.issued(all_reduce(g, i));
  const RingSnapshot s = ring.read();
  ASSERT_EQ(s.records.size(), kRingRecords);
  EXPECT_EQ(s.records.front().seq, 10u);
  EXPECT_EQ(s.records.back().seq, kRingRecords + 9);
  FlightRecorder off(nullptr);
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.issued(all_reduce(0, 0)), kWriting);
  off.finished(kWriting, true);  // ignored
}

TEST(FlightRecorderTest, RejectsMemoryThatIsNotARing) {
  std::vector<std::byte> zeros(kRingBytes);
  EXPECT_THROW(read_ring(zeros.data(), zeros.size()), RingError);
  Ring ring;
  EXPECT_THROW(read_ring(ring.bytes.get(), kRingBytes - 1), RingError);
}

// Writers on several threads while a reader copies the ring: every record read is whole.
TEST(FlightRecorderTest, AReaderSeesWholeRecordsWhileThreadsWrite) {
  Ring ring;
  const std::uint32_t g = ring.recorder.add_group(0, "world", 2, 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t) {
    writers.emplace_back([&, t] {
      for (std::uint64_t i = 0; !stop.load(); ++i) {
        const std::uint64_t id = ring.recorder.issued(all_reduce(g, i, 100 + t));
        ring.recorder.finished(id, true);
      }
    });
  }
  for (int round = 0; round < 200; ++round) {
    for (const OpRecord& r : ring.read().records) {
      ASSERT_EQ(r.op, "all_reduce");
      ASSERT_GE(r.count, 100u);
      ASSERT_LE(r.count, 102u);
    }
  }
  stop = true;
  for (auto& w : writers) w.join();
}

// Two ranks' rings, each with `ops` collectives on group "world" (id 0), the last of the longer
// one still running unless `all_done`.
std::vector<RankView> two_ranks(int ops0, int ops1, bool all_done = false) {
  std::vector<RankView> views;
  for (int rank : {0, 1}) {
    Ring ring;
    ring.recorder.set_rank(rank, 2);
    const std::uint32_t g = ring.recorder.add_group(0, "world", 2, rank);
    for (int i = 0; i < (rank == 0 ? ops0 : ops1); ++i) {
      const FlightRecorder::Site site("step " + std::to_string(i));
      const std::uint64_t id = ring.recorder.issued(all_reduce(g, static_cast<std::uint64_t>(i)));
      ring.recorder.started(id);
      if (all_done || i + 1 < std::max(ops0, ops1)) ring.recorder.finished(id, true);
    }
    views.push_back({rank, ring.read(), ""});
  }
  return views;
}

TEST(DiagnosisTest, NamesTheRankBehindAndWhereTheOthersWait) {
  auto views = two_ranks(5, 3);
  views[1].status = "stopped";
  const auto lines = diagnose(views, 0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("rank 1 is behind on group 'world': rank 1's last collective "
                                  "there is #2 all_reduce(count=4, dtype=float32, op=sum) "
                                  "(completed, at 'step 2') (rank 1 stopped); rank 0 reached #4"));
  EXPECT_THAT(lines[0], HasSubstr("(started"));
}

TEST(DiagnosisTest, NamesTheFirstCollectiveWhereRanksDisagree) {
  auto views = two_ranks(3, 3);
  views[1].ring->records[1].count = 8;
  const auto lines = diagnose(views, 0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "flight recorder: ranks diverged on group 'world' at collective #1: rank 0 called "
            "all_reduce(count=4, dtype=float32, op=sum) at 'step 1'; rank 1 called "
            "all_reduce(count=8, dtype=float32, op=sum) at 'step 1'.");
}

TEST(DiagnosisTest, SaysWhenTheCollectivesAgreeAndWhenThereIsNothingToRead) {
  EXPECT_THAT(diagnose(two_ranks(3, 3), 0),
              ElementsAre(HasSubstr("every rank made the same collective calls")));
  EXPECT_TRUE(diagnose(two_ranks(3, 3, /*all_done=*/true), 0).empty());  // stopped elsewhere
  auto views = two_ranks(3, 3);
  views[1].ring.reset();
  EXPECT_THAT(diagnose(views, 0), ElementsAre(HasSubstr("rank 1 recorded nothing")));
  views[0].ring.reset();
  EXPECT_TRUE(diagnose(views, 0).empty());
}

}  // namespace
}  // namespace weft::recorder
