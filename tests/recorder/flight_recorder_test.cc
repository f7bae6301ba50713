// The flight recorder's ring written and read back (fields, labels, wrap-around, concurrent
// writers and a reader), dumped and read back, and the diagnosis on rings made up for each
// finding.
#include "weft/recorder/flight_recorder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"
#include "weft/recorder/diagnosis.h"
#include "weft/recorder/dump.h"
#include "weft/recorder/ring_reader.h"

namespace weft::recorder {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kTwo[] = {0, 1};
constexpr int kFour[] = {0, 1, 2, 3};

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
  const std::uint32_t world = ring.recorder.add_group(7, "world", kFour, 3);
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

TEST(FlightRecorderTest, NestedLabelsJoinTheOuterOne) {
  Ring ring;
  const std::uint32_t g = ring.recorder.add_group(0, "world", kTwo, 0);
  {
    const FlightRecorder::Site step("step 3");
    const FlightRecorder::Site stage("pipeline 1SEND_B0");
    ring.recorder.issued(all_reduce(g, 0));
  }
  const FlightRecorder::Site alone("DDP bucket 2");
  ring.recorder.issued(all_reduce(g, 1));
  const RingSnapshot s = ring.read();
  ASSERT_EQ(s.records.size(), 2u);
  EXPECT_EQ(s.records[0].site, "step 3 / pipeline 1SEND_B0");
  EXPECT_EQ(s.records[1].site, "DDP bucket 2");
  EXPECT_THAT(s.groups[0].members, ElementsAre(0, 1));
}

TEST(FlightRecorderTest, CutsTextToItsFieldAndLeavesNothingOfALongerOne) {
  Ring ring;
  const std::uint32_t g = ring.recorder.add_group(0, "world", kTwo, 0);
  const std::string long_label(60, 'x');
  {
    const FlightRecorder::Site site(long_label);
    ring.recorder.issued({.group = g, .op = "reduce_scatter_tensor_coalesced", .reduce = "avg"});
  }
  RingSnapshot s = ring.read();
  ASSERT_EQ(s.records.size(), 1u);
  EXPECT_EQ(s.records[0].site, long_label.substr(0, sizeof(Record::site) - 1));
  EXPECT_EQ(s.records[0].op, std::string("reduce_scatter_tensor_coalesced").substr(0, 23));
  EXPECT_EQ(s.records[0].reduce, "avg");
  // Around the ring to the same record, with shorter text.
  for (std::uint32_t i = 1; i < kRingRecords; ++i) ring.recorder.issued(all_reduce(g, i));
  {
    const FlightRecorder::Site site("short");
    ring.recorder.issued({.group = g, .op = "send", .collective = false});
  }
  s = ring.read();
  ASSERT_EQ(s.records.size(), kRingRecords);
  EXPECT_EQ(s.records.back().site, "short");
  EXPECT_EQ(s.records.back().op, "send");
  EXPECT_EQ(s.records.back().reduce, "");
}

TEST(FlightRecorderTest, KeepsTheLastRecordsAndNeverWritesWhenDisabled) {
  Ring ring;
  const std::uint32_t g = ring.recorder.add_group(0, "world", kTwo, 0);
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
// A writer between claiming an operation's number and stamping its record: the reader sees
// a record not yet written (the ring's zero-filled memory) as no operation's, the first one's
// included.
TEST(FlightRecorderTest, ARecordClaimedAndNotYetWrittenIsNotRead) {
  Ring ring;
  auto& header = *reinterpret_cast<RingHeader*>(ring.bytes.get());
  header.next.store(1);  // operation 0 claimed, its record untouched
  EXPECT_TRUE(ring.read().records.empty());
  header.next.store(0);
  ring.recorder.issued(all_reduce(0, 0));
  ASSERT_EQ(ring.read().records.size(), 1u);
  EXPECT_EQ(ring.read().records[0].op, "all_reduce");
}

TEST(FlightRecorderTest, AReaderSeesWholeRecordsWhileThreadsWrite) {
  Ring ring;
  const std::uint32_t g = ring.recorder.add_group(0, "world", kTwo, 0);
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
  std::string torn;  // the first record read torn, if any (the writers are joined first)
  for (int round = 0; round < 200 && torn.empty(); ++round) {
    for (const OpRecord& r : ring.read().records) {
      if (r.op != "all_reduce" || r.count < 100 || r.count > 102) {
        torn = "record " + std::to_string(r.id) + ": " + r.call();
        break;
      }
    }
  }
  stop = true;
  for (auto& w : writers) w.join();
  EXPECT_EQ(torn, "");
}

// Two ranks' rings, each with `ops` collectives on group "world" (id 0), the last of the longer
// one still running unless `all_done`.
std::vector<RankView> two_ranks(int ops0, int ops1, bool all_done = false) {
  std::vector<RankView> views;
  for (int rank : {0, 1}) {
    Ring ring;
    ring.recorder.set_rank(rank, 2);
    const std::uint32_t g = ring.recorder.add_group(0, "world", kTwo, rank);
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
  const auto lines = diagnose(views);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("rank 1 is behind on group 'world': rank 1's last collective "
                                  "there is #2 all_reduce(count=4, dtype=float32, op=sum) "
                                  "(completed, at 'step 2') (rank 1 stopped); rank 0 reached #4"));
  EXPECT_THAT(lines[0], HasSubstr("(started"));
}

TEST(DiagnosisTest, NamesTheFirstCollectiveWhereRanksDisagree) {
  auto views = two_ranks(3, 3);
  views[1].ring->records[1].count = 8;
  const auto lines = diagnose(views);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "flight recorder: ranks diverged on group 'world' at collective #1: rank 0 called "
            "all_reduce(count=4, dtype=float32, op=sum) at 'step 1'; rank 1 called "
            "all_reduce(count=8, dtype=float32, op=sum) at 'step 1'.");
}

TEST(DiagnosisTest, SaysWhenTheCollectivesAgreeAndWhenThereIsNothingToRead) {
  EXPECT_THAT(diagnose(two_ranks(3, 3)),
              ElementsAre(HasSubstr("every rank made the same collective calls")));
  EXPECT_THAT(diagnose(two_ranks(3, 3, /*all_done=*/true)),
              ElementsAre(HasSubstr("every operation every rank issued completed: the stop was "
                                    "outside communication")));
  auto views = two_ranks(3, 3);
  views[1].ring.reset();
  views[1].missing = "no dump";
  EXPECT_THAT(diagnose(views),
              ElementsAre("flight recorder: rank 1 has no record (no dump)",
                          HasSubstr("rank 0 was in #2 all_reduce(count=4, dtype=float32, "
                                    "op=sum) (started")));
  views[0].ring.reset();
  EXPECT_TRUE(diagnose(views).empty());
}

// Rank 0 receives from rank 1; rank 1 last completed a send (`stuck`), or receives from rank 0.
std::vector<RankView> receiving(bool stuck) {
  std::vector<RankView> views;
  for (int rank : {0, 1}) {
    Ring ring;
    ring.recorder.set_rank(rank, 2);
    const std::uint32_t g = ring.recorder.add_group(0, "world", kTwo, rank);
    const OpInfo recv{.group = g, .op = "recv", .peer = 1 - rank, .collective = false};
    const OpInfo send{.group = g, .op = "send", .peer = 1 - rank, .collective = false};
    const std::uint64_t id = ring.recorder.issued(rank == 1 && stuck ? send : recv);
    if (rank == 1 && stuck) ring.recorder.finished(id, true);
    views.push_back({rank, ring.read(), ""});
  }
  return views;
}

TEST(DiagnosisTest, NamesAPointToPointDeadlockAndAPeerStuckElsewhere) {
  EXPECT_THAT(diagnose(receiving(false)),
              ElementsAre(HasSubstr("point-to-point operations that did not complete: rank 0 in "
                                    "recv(peer=1) on group 'world' (issued"),
                          "flight recorder: ranks 0 and 1 each wait to receive from the other: "
                          "a deadlock"));
  EXPECT_THAT(diagnose(receiving(true)),
              ElementsAre(HasSubstr("rank 0 in recv(peer=1)"),
                          HasSubstr("rank 0 waits on rank 1 in recv(peer=1), and rank 1 is in no "
                                    "point-to-point operation with it: its last completed "
                                    "operation is send(peer=0) (completed)")));
}

TEST(DiagnosisTest, NamesTheRankThatArrivesLastAtMostCollectives) {
  auto views = two_ranks(10, 10, /*all_done=*/true);
  for (int i = 0; i < 10; ++i) {
    views[0].ring->records[static_cast<std::size_t>(i)].issued_ns = i * 100'000'000;
    views[1].ring->records[static_cast<std::size_t>(i)].issued_ns = i * 100'000'000 + 40'000'000;
  }
  EXPECT_EQ(straggler(views),
            "flight recorder: rank 1 is a straggler on group 'world': it arrived "
            "last at 10 of 10 collectives, 40 ms after the next on average; the "
            "others spent 0.4 s of those collectives' 0.9 s waiting");
  views[1].ring->records[3].issued_ns = 0;  // rank 0 last at three of ten: still rank 1
  views[1].ring->records[5].issued_ns = 0;
  views[1].ring->records[7].issued_ns = 0;
  EXPECT_FALSE(straggler(views).has_value());  // last at 7 of 10: under three quarters
}

TEST(DumpTest, RoundTripsARingAndRefusesWhatIsNotOne) {
  Ring ring;
  ring.recorder.set_rank(1, 2);
  const int members[] = {1, 3};
  const std::uint32_t g = ring.recorder.add_group(5, "dp", members, 0);
  ring.recorder.finished(ring.recorder.issued(all_reduce(g, 0)), true);
  ring.recorder.issued({.group = g, .op = "send", .count = 3, .peer = 1, .collective = false});
  const Dump dump = dump_of(ring.read(), "exited with code 1");
  const Dump back = parse_dump(dump_json(dump), "test");
  EXPECT_EQ(back.ring.rank, 1);
  EXPECT_EQ(back.status, "exited with code 1");
  EXPECT_EQ(back.dumped_monotonic_ns, dump.dumped_monotonic_ns);
  ASSERT_EQ(back.ring.groups.size(), 1u);
  EXPECT_THAT(back.ring.groups[0].members, ElementsAre(1, 3));
  ASSERT_EQ(back.ring.records.size(), 2u);
  EXPECT_EQ(back.ring.records[0].call(), dump.ring.records[0].call());
  EXPECT_EQ(back.ring.records[1].call(), "send(peer=1)");
  EXPECT_EQ(back.ring.records[1].state, OpState::kIssued);
  std::string text = dump_json(dump);
  EXPECT_THROW(parse_dump(text.substr(0, text.size() / 2), "half"), DumpError);
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  EXPECT_THROW(parse_dump(replaced("\"group\": 0", "\"group\": 1"), "group"), DumpError);
  EXPECT_THROW(parse_dump(replaced("\"completed\"", "\"done\""), "state"), DumpError);
  EXPECT_THROW(parse_dump(replaced("\"version\": 1", "\"version\": 9"), "version"), DumpError);
  EXPECT_THROW(parse_dump(replaced("\"float32\"", "\"float31\""), "dtype"), DumpError);
  EXPECT_THROW(parse_dump("[]", "array"), DumpError);
}

TEST(DumpTest, ARecorderDumpsOnItsFirstFailureOnly) {
  test::TempDir dir;
  const std::string prefix = dir.file("trace_");
  auto bytes = std::make_unique<std::byte[]>(kRingBytes);
  FlightRecorder recorder(bytes.get(), prefix);
  recorder.set_rank(1, 2);
  const std::uint32_t g = recorder.add_group(0, "world", kTwo, 1);
  recorder.finished(recorder.issued(all_reduce(g, 0)), true);
  EXPECT_FALSE(std::filesystem::exists(prefix + "1.json"));
  recorder.finished(recorder.issued(all_reduce(g, 1)), false);
  const Dump dump = read_dump(prefix + "1.json");
  EXPECT_EQ(dump.status, "failed in an operation");
  ASSERT_EQ(dump.ring.records.size(), 2u);
  EXPECT_EQ(dump.ring.records[1].state, OpState::kFailed);
  std::filesystem::remove(prefix + "1.json");
  recorder.finished(recorder.issued(all_reduce(g, 2)), false);
  EXPECT_FALSE(std::filesystem::exists(prefix + "1.json"));  // the first failure's only
}

TEST(DumpTest, AProcessHoldingSeveralRanksDumpsNothing) {
  test::TempDir dir;
  auto bytes = std::make_unique<std::byte[]>(kRingBytes);
  FlightRecorder recorder(bytes.get(), dir.file("trace_"));
  recorder.set_rank(0, 2);
  recorder.set_rank(1, 2);
  EXPECT_EQ(read_ring(bytes.get(), kRingBytes).rank, kSeveralRanks);
  recorder.finished(recorder.issued(all_reduce(0, 0)), false);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace weft::recorder
