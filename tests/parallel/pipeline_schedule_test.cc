// Pipeline schedules as data: the action strings and CSV of torch.distributed.pipelining, every
// generator over rank and micro-batch counts (valid, complete, placed as PyTorch places the
// stages, and equal to PyTorch's own output where a PyTorch artifact exists), the lowering to
// SEND/RECV, the validator's errors, the simulated bubbles against the textbook and the
// timeline.
#include "weft/parallel/pipeline_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <tuple>
#include <utility>

#include "weft/base/error.h"
#include "weft/parallel/pipeline_picture.h"

namespace weft::parallel {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr ScheduleKind kAllKinds[] = {
    ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B,
    ScheduleKind::kInterleavedZeroBubble, ScheduleKind::kZBVZeroBubble};

int stages_per_rank_of(ScheduleKind kind) {
  return kind == ScheduleKind::kGPipe || kind == ScheduleKind::k1F1B ? 1 : 2;
}

// PyTorch's conditions on the micro-batch count, restated from schedules.py.
bool pytorch_accepts(ScheduleKind kind, int ranks, int microbatches) {
  switch (kind) {
    case ScheduleKind::k1F1B:
      return microbatches >= ranks;
    case ScheduleKind::kInterleaved1F1B:
    case ScheduleKind::kInterleavedZeroBubble:
      return microbatches % std::max(1, microbatches / ranks) == 0;
    default:
      return true;
  }
}

std::vector<Action> parse_all(const std::vector<std::string>& texts) {
  std::vector<Action> actions;
  for (const std::string& text : texts) actions.push_back(parse_action(text));
  return actions;
}

// The message validate() throws, or "" when it accepts.
std::string validation_error(const Schedule& s) {
  try {
    validate(s);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

ActionCosts textbook_costs() { return {.forward = 1, .backward_input = 1, .backward_weight = 1}; }

TEST(PipelineActionTest, StringsMatchPyTorch) {
  // From PyTorch's test_schedule.py (TestScheduleLowering.test_action_parse) and the
  // docstring of _Action.from_str.
  const std::vector<std::pair<std::string, Action>> cases = {
      {"1F0", {1, ActionKind::kForward, 0}},        {"2B1", {2, ActionKind::kFullBackward, 1}},
      {"0W3", {0, ActionKind::kBackwardWeight, 3}}, {"2SEND_B2", {2, ActionKind::kSendB, 2}},
      {"1RECV_F1", {1, ActionKind::kRecvF, 1}},     {"3SEND_F1", {3, ActionKind::kSendF, 1}},
      {"2I3", {2, ActionKind::kBackwardInput, 3}},  {"0RECV_B12", {0, ActionKind::kRecvB, 12}},
  };
  for (const auto& [text, action] : cases) {
    EXPECT_EQ(parse_action(text), action) << text;
    EXPECT_EQ(to_string(action), text);
  }
  EXPECT_EQ(parse_action(" 2F0\t"), (Action{2, ActionKind::kForward, 0}));  // stripped
}

TEST(PipelineActionTest, RejectsWhatIsNotAnAction) {
  for (const char* bad : {"", "F0", "0X1", "0F", "0F1x", "1UNSHARD", "-1F0", "0SEND_1"}) {
    try {
      parse_action(bad);
      ADD_FAILURE() << "parsed '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("'" + std::string(bad) + "'"), HasSubstr("e.g. 2F0")));
    }
  }
}

TEST(PipelineScheduleTest, NamesParseCaseInsensitively) {
  for (ScheduleKind kind : kAllKinds) EXPECT_EQ(parse_schedule_kind(schedule_name(kind)), kind);
  EXPECT_EQ(parse_schedule_kind("interleaved1f1b"), ScheduleKind::kInterleaved1F1B);
  EXPECT_EQ(parse_schedule_kind("zbvzerobubble"), ScheduleKind::kZBVZeroBubble);
  try {
    parse_schedule_kind("LoopedBFS");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'LoopedBFS'; the valid names are GPipe, 1F1B, "
                                    "Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble"));
  }
}

// Each (stage, micro-batch) has one F and one backward: one B, or one I and one W.
void expect_complete(const Schedule& s, const std::string& what) {
  std::map<std::tuple<int, ActionKind, int>, int> count;
  for (const auto& list : s.actions) {
    for (const Action& a : list) ++count[{a.stage, a.kind, a.microbatch}];
  }
  for (int stage = 0; stage < s.num_stages(); ++stage) {
    for (int mb = 0; mb < s.microbatches; ++mb) {
      auto n = [&](ActionKind kind) { return count[{stage, kind, mb}]; };
      EXPECT_EQ(n(ActionKind::kForward), 1) << what << " stage " << stage << " mb " << mb;
      const bool full = n(ActionKind::kFullBackward) == 1 && n(ActionKind::kBackwardInput) == 0 &&
                        n(ActionKind::kBackwardWeight) == 0;
      const bool split = n(ActionKind::kFullBackward) == 0 && n(ActionKind::kBackwardInput) == 1 &&
                         n(ActionKind::kBackwardWeight) == 1;
      EXPECT_TRUE(full || split) << what << " stage " << stage << " mb " << mb;
    }
  }
}

void expect_placed(const Schedule& s, ScheduleKind kind, const std::string& what) {
  const std::vector<int> expected = kind == ScheduleKind::kZBVZeroBubble
                                        ? v_placement(s.ranks, 2)
                                        : loop_placement(s.ranks, s.stages_per_rank);
  EXPECT_EQ(s.stage_to_rank, expected) << what;
  if (kind == ScheduleKind::kZBVZeroBubble) {
    for (int r = 0; r < s.ranks; ++r) {
      EXPECT_EQ(s.stage_to_rank[r], r);
      EXPECT_EQ(s.stage_to_rank[2 * s.ranks - 1 - r], r);
    }
  }
  for (int r = 0; r < s.ranks; ++r) {
    for (const Action& a : s.actions[r]) EXPECT_EQ(s.stage_to_rank[a.stage], r) << what << " " << a;
  }
}

TEST(PipelineScheduleTest, EveryGeneratorIsValidWhereverPyTorchAcceptsTheCounts) {
  for (ScheduleKind kind : kAllKinds) {
    for (int ranks : {1, 2, 4}) {
      for (int m = 1; m <= 16; ++m) {
        const std::string what = std::string(schedule_name(kind)) + " ranks " +
                                 std::to_string(ranks) + " m " + std::to_string(m);
        const int spr = stages_per_rank_of(kind);
        if (!pytorch_accepts(kind, ranks, m)) {
          EXPECT_THROW(make_schedule(kind, ranks, spr, m), InvalidArgument) << what;
          continue;
        }
        const Schedule s = make_schedule(kind, ranks, spr, m);
        EXPECT_EQ(validation_error(s), "") << what;
        expect_complete(s, what);
        expect_placed(s, kind, what);
        const Schedule lowered = add_send_recv(s);
        EXPECT_EQ(validation_error(lowered), "") << what << " with SEND/RECV";
      }
    }
  }
}

TEST(PipelineScheduleTest, CountErrorsSayWhatIsRequired) {
  auto message = [](auto make) {
    try {
      make();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(message([] { schedule_1f1b(4, 1, 3); }), HasSubstr("at least as many micro-batches"));
  EXPECT_THAT(message([] { schedule_interleaved_1f1b(4, 2, 9); }),
              HasSubstr("= 2 rounds, which must divide the micro-batches"));
  EXPECT_THAT(message([] { schedule_gpipe(2, 2, 4); }), HasSubstr("one stage per rank"));
  EXPECT_THAT(message([] { schedule_zbv_zero_bubble(2, 3, 4); }),
              HasSubstr("exactly 2 stages per rank"));
  EXPECT_THAT(message([] { schedule_interleaved_zero_bubble(0, 2, 4); }),
              HasSubstr("must be positive"));
}

TEST(PipelineScheduleTest, InterleavedZeroBubbleEqualsPyTorchsArtifact) {
  // test/distributed/pipelining/artifacts/zb1p_2rank_2stagep_compute.csv: PyTorch's ZB1P on 2
  // ranks x 2 stages, 8 micro-batches, written when its "B" meant today's "I" (the input
  // gradient), with empty cells for its idle slots.
  std::string artifact =
      "0F0,0F1,2F0,,2F1,2B0,2W0,0F2,2B1,2W1,0F3,0B0,0W0,2F2,0B1,0W1,2F3,2B2,2W2,0F4,2B3,2W3,0F5,"
      "0B2,0W2,2F4,0B3,0W3,2F5,2B4,2W4,0F6,2B5,2W5,0F7,0B4,0W4,2F6,0B5,0W5,2F7,2B6,2W6,2B7,2W7,"
      "0B6,0W6,0B7,0W7\n"
      ",1F0,1F1,3F0,3B0,3F1,3B1,3W0,1F2,1B0,3W1,1F3,1B1,1W0,3F2,3B2,1W1,3F3,3B3,3W2,1F4,1B2,3W3,"
      "1F5,1B3,1W2,3F4,3B4,1W3,3F5,3B5,3W4,1F6,1B4,3W5,1F7,1B5,1W4,3F6,3B6,1W5,3F7,3B7,3W6,1B6,"
      "3W7,1B7,1W6,1W7\n";
  std::replace(artifact.begin(), artifact.end(), 'B', 'I');
  EXPECT_EQ(schedule_interleaved_zero_bubble(2, 2, 8), read_schedule_csv(artifact));
}

TEST(PipelineScheduleTest, OneFOneBWarmsUpByDistanceFromTheLastStage) {
  const Schedule s = schedule_1f1b(4, 1, 6);
  EXPECT_EQ(s.actions[0], parse_all({"0F0", "0F1", "0F2", "0F3", "0B0", "0F4", "0B1", "0F5", "0B2",
                                     "0B3", "0B4", "0B5"}));
  EXPECT_EQ(s.actions[3], parse_all({"3F0", "3B0", "3F1", "3B1", "3F2", "3B2", "3F3", "3B3", "3F4",
                                     "3B4", "3F5", "3B5"}));
}

// The runtime's gradients equal one process's accumulation of the same micro-batches bit for
// bit only if each stage runs its backwards in micro-batch order (docs/PARALLELISM.md).
TEST(PipelineScheduleTest, EachStageRunsItsBackwardsInMicroBatchOrder) {
  for (ScheduleKind kind :
       {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B,
        ScheduleKind::kInterleavedZeroBubble, ScheduleKind::kZBVZeroBubble}) {
    const bool single = kind == ScheduleKind::kGPipe || kind == ScheduleKind::k1F1B;
    for (int ranks : {2, 3, 4}) {
      for (int microbatches : {4, 8, 12}) {
        const Schedule s = make_schedule(kind, ranks, single ? 1 : 2, microbatches);
        // (stage, kind) -> the micro-batch its next B, I or W must be
        std::map<std::pair<int, ActionKind>, int> next;
        for (const auto& list : s.actions) {
          for (const Action& a : list) {
            if (a.kind == ActionKind::kForward) continue;
            const std::pair<int, ActionKind> key{a.stage, a.kind};
            EXPECT_EQ(a.microbatch, next[key]++)
                << schedule_name(kind) << " " << ranks << " ranks, " << microbatches << ": " << a;
          }
        }
      }
    }
  }
}

TEST(PipelineScheduleTest, SendRecvAsPyTorchLowersThem) {
  // PyTorch's TestScheduleLowering.test_send_recv, without its idle slots (the runtime drops
  // them before lowering). Rank 0 is PyTorch's expected list; on rank 1 the idle slot before
  // 1F0 let PyTorch place 1RECV_F1 before 1F0, here it comes after 1F0.
  Schedule compute{
      2,
      1,
      2,
      {0, 1},
      {parse_all({"0F0", "0F1", "0B0", "0B1"}), parse_all({"1F0", "1B0", "1F1", "1B1"})}};
  const Schedule lowered = add_send_recv(compute);
  EXPECT_EQ(lowered.actions[0], parse_all({"0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0",
                                           "0RECV_B1", "0B1"}));
  EXPECT_EQ(lowered.actions[1], parse_all({"1RECV_F0", "1F0", "1RECV_F1", "1B0", "1SEND_B0", "1F1",
                                           "1B1", "1SEND_B1"}));
  EXPECT_THROW(add_send_recv(lowered), InvalidArgument);
}

TEST(PipelineScheduleTest, AdjacentStagesOnOneRankNeedNoTransfer) {
  // ZB-V puts stages p-1 and p on rank p-1: the turn of the V passes data locally.
  const Schedule lowered = add_send_recv(schedule_zbv_zero_bubble(2, 2, 4));
  for (const auto& list : lowered.actions) {
    for (const Action& a : list) {
      if (a.kind == ActionKind::kSendF) {
        EXPECT_NE(a.stage, 1) << a;
      }
      if (a.kind == ActionKind::kSendB) {
        EXPECT_NE(a.stage, 2) << a;
      }
    }
  }
}

TEST(PipelineValidateTest, RejectsBackwardBeforeForward) {
  Schedule s = schedule_gpipe(2, 1, 2);
  std::swap(s.actions[1][1], s.actions[1][3]);  // 1F0 1F1 1B0 1B1 -> 1F0 1B1 1B0 1F1
  EXPECT_THAT(validation_error(s), HasSubstr("rank 1, action 1 (1B1): it comes before its F"));
  s = schedule_gpipe(2, 1, 2);
  std::rotate(s.actions[0].begin(), s.actions[0].begin() + 2, s.actions[0].end());
  EXPECT_THAT(validation_error(s), HasSubstr("rank 0, action 0 (0B0): it comes before its F"));
}

TEST(PipelineValidateTest, RejectsMisplacedDuplicatedAndMissingActions) {
  Schedule s = schedule_gpipe(2, 1, 2);
  s.actions[0].push_back(parse_action("1F0"));
  EXPECT_THAT(validation_error(s), HasSubstr("rank 0, action 4 (1F0): stage 1 is on rank 1"));
  s = schedule_gpipe(2, 1, 2);
  s.actions[1].push_back(parse_action("1F1"));
  EXPECT_THAT(validation_error(s), HasSubstr("rank 1, action 4 (1F1): it already ran at action 1"));
  s = schedule_gpipe(2, 1, 2);
  s.actions[1].erase(s.actions[1].begin() + 3);  // 1B1
  EXPECT_THAT(validation_error(s), HasSubstr("stage 1 micro-batch 1 (on rank 1) has no backward"));
  s = schedule_zbv_zero_bubble(2, 2, 3);
  std::erase(s.actions[0], parse_action("0W2"));
  EXPECT_THAT(validation_error(s),
              HasSubstr("stage 0 micro-batch 2 (on rank 0) has an I but no W"));
  s = schedule_zbv_zero_bubble(2, 2, 3);
  auto& list = s.actions[1];
  std::iter_swap(std::find(list.begin(), list.end(), parse_action("2I0")),
                 std::find(list.begin(), list.end(), parse_action("2W0")));
  EXPECT_THAT(validation_error(s), HasSubstr("(2W0): it comes before its I"));
}

TEST(PipelineValidateTest, RejectsAnUnmatchedSend) {
  Schedule s = add_send_recv(schedule_gpipe(2, 1, 2));
  std::erase(s.actions[1], parse_action("1RECV_F1"));
  EXPECT_THAT(validation_error(s),
              HasSubstr("(0SEND_F1): rank 1 never runs the matching 1RECV_F1"));
  s = add_send_recv(schedule_gpipe(2, 1, 2));
  std::erase(s.actions[1], parse_action("1SEND_B0"));
  EXPECT_THAT(validation_error(s),
              HasSubstr("(0RECV_B0): rank 1 never runs the matching 1SEND_B0"));
  s = add_send_recv(schedule_gpipe(2, 1, 2));
  auto& list = s.actions[1];
  std::iter_swap(std::find(list.begin(), list.end(), parse_action("1RECV_F0")),
                 std::find(list.begin(), list.end(), parse_action("1F0")));
  EXPECT_THAT(
      validation_error(s),
      HasSubstr("(1F0): its input comes from another rank, and no 1RECV_F0 comes before it"));
}

TEST(PipelineValidateTest, NamesTheStuckActionsOfADeadlock) {
  // Each rank receives first: rank 0 waits for a gradient that rank 1 sends only after the
  // activation that rank 0 sends only after that gradient.
  const Schedule s{2,
                   1,
                   1,
                   {0, 1},
                   {parse_all({"0RECV_B0", "0F0", "0SEND_F0", "0B0"}),
                    parse_all({"1RECV_F0", "1F0", "1B0", "1SEND_B0"})}};
  EXPECT_THAT(validation_error(s),
              AllOf(HasSubstr("deadlocks"),
                    HasSubstr("rank 0, action 0 (0RECV_B0) waits for 1SEND_B0 on rank 1"),
                    HasSubstr("rank 1, action 0 (1RECV_F0) waits for 0SEND_F0 on rank 0")));
  // Compute-only: rank 1 puts stage 3's forward before stage 1's, which stage 2 (on rank 0)
  // needs before it can feed stage 3.
  Schedule looped = schedule_interleaved_1f1b(2, 2, 2);
  auto& list = looped.actions[1];
  std::rotate(list.begin(), list.begin() + 1, list.begin() + 3);  // 1F0 1F1 3F0 -> 1F1 3F0 1F0
  EXPECT_THAT(validation_error(looped), HasSubstr("(3F0) waits for 2F0 on rank 0"));
}

TEST(PipelineSimulateTest, GPipeAnd1F1BHaveTheTextbookBubble) {
  for (int p : {2, 4}) {
    for (int m : {4, 8, 16}) {
      const double textbook = double(p - 1) / (m + p - 1);
      for (const Schedule& s : {schedule_gpipe(p, 1, m), schedule_1f1b(p, 1, m)}) {
        EXPECT_NEAR(simulate(s, textbook_costs()).bubble_fraction, textbook, 1e-12);
        // The explicit transfers change nothing without latency.
        EXPECT_NEAR(simulate(add_send_recv(s), textbook_costs()).bubble_fraction, textbook, 1e-12);
        EXPECT_NEAR(simulate(s, textbook_costs()).makespan, 3.0 * (m + p - 1), 1e-12);
      }
    }
  }
}

TEST(PipelineSimulateTest, Interleaved1F1BHasMegatronsBubble) {
  // Narayanan et al. 2021: v stages per rank divide the bubble by v, (p-1)/(v·m + p-1).
  for (int p : {2, 4}) {
    for (int m : {p, 2 * p, 4 * p}) {
      const double megatron = double(p - 1) / (2 * m + p - 1);
      EXPECT_NEAR(simulate(schedule_interleaved_1f1b(p, 2, m), textbook_costs()).bubble_fraction,
                  megatron, 1e-12)
          << "ranks " << p << " m " << m;
    }
  }
}

TEST(PipelineSimulateTest, ZeroBubbleBeatsOneFOneB) {
  std::cout << "simulated bubble, F=1 B=2 I=1 W=1, 8 micro-batches:\n";
  for (int p : {2, 4}) {
    const double one_f_one_b = simulate(schedule_1f1b(p, 1, 8), textbook_costs()).bubble_fraction;
    for (ScheduleKind kind : kAllKinds) {
      const Schedule s = make_schedule(kind, p, stages_per_rank_of(kind), 8);
      const double bubble = simulate(s, textbook_costs()).bubble_fraction;
      const double lowered = simulate(add_send_recv(s), textbook_costs()).bubble_fraction;
      EXPECT_NEAR(lowered, bubble, 1e-12) << schedule_name(kind) << " ranks " << p;
      std::cout << "  ranks " << p << " " << schedule_name(kind) << ": " << bubble
                << " (with SEND/RECV: " << lowered << ")\n";
      if (kind == ScheduleKind::kInterleavedZeroBubble || kind == ScheduleKind::kZBVZeroBubble) {
        EXPECT_LT(bubble, one_f_one_b) << schedule_name(kind) << " ranks " << p;
      }
    }
  }
}

TEST(PipelineSimulateTest, LatencyAndCostsAreAccounted) {
  const Schedule s = schedule_1f1b(2, 1, 2);
  const Simulation base = simulate(s, textbook_costs());
  EXPECT_DOUBLE_EQ(base.makespan, 9);
  EXPECT_EQ(base.busy, (std::vector<double>{6, 6}));
  EXPECT_DOUBLE_EQ(base.idle_fraction[0], 1 - 6.0 / 9);
  ActionCosts slow = textbook_costs();
  slow.transfer_latency = 0.5;
  EXPECT_GT(simulate(s, slow).makespan, base.makespan);
  EXPECT_DOUBLE_EQ(simulate(add_send_recv(s), slow).makespan, simulate(s, slow).makespan);
  ActionCosts fused = textbook_costs();
  fused.full_backward = 1.5;  // a B cheaper than I + W
  EXPECT_DOUBLE_EQ(simulate(s, fused).busy[0], 2 * 1 + 2 * 1.5);
}

// A last stage with twice the work (the output layer and the loss, as measured): it waits less
// than the first, which waits for it.
TEST(PipelineSimulateTest, EachRankWithItsOwnCosts) {
  const Schedule s = schedule_gpipe(2, 1, 1);
  const ActionCosts light{.forward = 1, .full_backward = 2},
      heavy{.forward = 2, .full_backward = 4};
  const Simulation sim = simulate(s, std::vector<ActionCosts>{light, heavy});
  EXPECT_DOUBLE_EQ(sim.makespan, 9);  // F0 on rank 0, F0 and B0 on rank 1, B0 on rank 0
  EXPECT_EQ(sim.busy, (std::vector<double>{3, 6}));
  EXPECT_DOUBLE_EQ(sim.idle_fraction[0], 1 - 3.0 / 9);
  EXPECT_DOUBLE_EQ(sim.idle_fraction[1], 1 - 6.0 / 9);
  const Schedule ofb = schedule_1f1b(4, 1, 8);
  EXPECT_EQ(simulate(ofb, std::vector<ActionCosts>(4, textbook_costs())).idle_fraction,
            simulate(ofb, textbook_costs()).idle_fraction);
  EXPECT_THROW(simulate(s, std::vector<ActionCosts>{light}), InvalidArgument);
}

TEST(PipelineSimulateTest, InFlightMicroBatches) {
  for (int p : {2, 4}) {
    for (int m : {4, 8}) {
      const std::vector<int> one_f_one_b = max_in_flight(schedule_1f1b(p, 1, m));
      for (int r = 0; r < p; ++r) EXPECT_LE(one_f_one_b[r], p);
      EXPECT_EQ(one_f_one_b[0], p);
      EXPECT_EQ(max_in_flight(schedule_gpipe(p, 1, m)), std::vector<int>(p, m));
    }
  }
}

TEST(PipelineCsvTest, RoundTrips) {
  for (ScheduleKind kind : kAllKinds) {
    for (int p : {2, 4}) {
      const Schedule s = make_schedule(kind, p, stages_per_rank_of(kind), 8);
      EXPECT_EQ(read_schedule_csv(write_schedule_csv(s)), s) << schedule_name(kind);
      const Schedule lowered = add_send_recv(s);
      EXPECT_EQ(read_schedule_csv(write_schedule_csv(lowered)), lowered) << schedule_name(kind);
    }
  }
  EXPECT_EQ(write_schedule_csv(schedule_gpipe(2, 1, 2)), "0F0,0F1,0B0,0B1\r\n1F0,1F1,1B0,1B1\r\n");
}

TEST(PipelineCsvTest, NamesTheBadCell) {
  try {
    read_schedule_csv("0F0,0F1,0B0,0B1\n1F0, 1X1 ,1B0,1B1\n");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("row 2 (rank 1), column 2: ' 1X1 ' is not a pipeline action"));
  }
  try {
    read_schedule_csv("0F0,1F0\n1F1\n");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("row 2 (rank 1), column 1: stage 1 is in row 1 too"));
  }
  EXPECT_THROW(read_schedule_csv(""), InvalidArgument);
  EXPECT_THROW(read_schedule_csv("0F0\n2F0\n"), InvalidArgument);  // no row holds stage 1
}

TEST(PipelineTimelineTest, OneColumnPerUnitOfTime) {
  const Schedule s = schedule_gpipe(2, 1, 2);
  EXPECT_EQ(format_timeline(s, simulate(s, textbook_costs())),
            "rank 0 | F0 F1 .. .. .. B0 -- B1 --\n"
            "rank 1 | .. F0 F1 B0 -- B1 -- .. ..\n");
  const Schedule looped = schedule_interleaved_1f1b(2, 2, 2);
  const std::string text = format_timeline(looped, simulate(looped));
  EXPECT_THAT(text, AllOf(HasSubstr("rank 0 | 0F0 0F1 2F0"), HasSubstr("rank 1 | ... 1F0")));
}

// A step as it ran draws as the simulation with the same times does: timed as simulate()
// times 1F1B (forward 1, backward 2) but in seconds, 5 ms a forward, from an arbitrary clock.
TEST(PipelineTimelineTest, MeasuredTimesDrawAsTheSimulationWithThoseTimes) {
  const Schedule s = make_schedule(ScheduleKind::k1F1B, 2, 1, 4);
  const Simulation sim = simulate(s, {.forward = 1, .backward_input = 1, .backward_weight = 1});
  std::vector<std::vector<double>> start = sim.start, end = sim.end;
  for (auto* times : {&start, &end})
    for (auto& rank : *times)
      for (double& t : rank) t = 1000 + 0.005 * t;
  const std::string measured = measured_timeline_svg(s, start, end, "measured");
  char bubble[32];
  std::snprintf(bubble, sizeof(bubble), "(bubble %.1f%%)", 100 * sim.bubble_fraction);
  EXPECT_THAT(measured, HasSubstr(std::string("measured; time in forwards of 5.0 ms ") + bubble));
  const std::string simulated = timeline_svg(s, sim, "t");
  const auto boxes = [](const std::string& svg) { return svg.substr(svg.find(">rank 0<")); };
  EXPECT_EQ(boxes(measured), boxes(simulated));  // every box where the simulation puts it
  start.pop_back();
  EXPECT_THROW(measured_timeline_svg(s, start, end, "m"), InvalidArgument);
}

}  // namespace
}  // namespace weft::parallel
