// Pipeline-parallel schedules as data: which stage runs which micro-batch's forward or
// backward, in what order, on each rank. Pure logic (no model, no communication): the runtime
// that executes a schedule, and the tools that print one, build on this.
//
// The vocabulary is torch.distributed.pipelining's (schedules.py), so that a schedule TorchTitan
// runs can be written here, compared action for action and exchanged as PyTorch's CSV:
//
//   - The model is cut into S = ranks x stages_per_rank stages (global, "virtual" stage indices
//     0 .. S-1, in model order). Each rank holds stages_per_rank of them: the loop layout puts
//     stage s on rank s % ranks (GPipe, 1F1B, the interleaved schedules); the V layout of ZB-V
//     puts stages r and 2·ranks-1-r on rank r, so the last stage comes back to rank 0.
//   - An action is (stage, kind, micro-batch), printed as PyTorch prints its _Action: "0F1",
//     "1B0", "2I3", "2W3", "0SEND_F1", "1RECV_F1". F is a forward; B a full backward; I the
//     backward for the input gradient only and W the weight gradient (zero bubble's split of B:
//     I is on the critical path, W can fill a bubble later). SEND_F s sends stage s's output
//     to stage s+1; RECV_F s receives stage s's input from stage s-1; SEND_B s sends stage
//     s's input gradient to stage s-1; RECV_B s receives stage s's output gradient from s+1.
//   - A schedule is one list of actions per rank, in execution order. A compute-only schedule
//     (F, B, I, W: PyTorch's "compute_only" format) leaves the transfers between ranks
//     implicit; add_send_recv() lowers it to a compute+comms schedule, PyTorch's
//     _add_send_recv, which is what its runtime (_PipelineScheduleRuntime) executes.
//
// PyTorch's generated schedules also hold idle slots (None) that align the ranks' steps in its
// printouts; its runtime drops them before lowering, and so do these generators (and the CSV
// reader skips empty cells), so the lists here are exactly what the runtime runs.
//
//   Schedule s = make_schedule(parse_schedule_kind("Interleaved1F1B"), 4, 2, 8);
//   validate(s);                                    // throws InvalidArgument naming the action
//   Simulation sim = simulate(add_send_recv(s), {.forward = 1, .backward_input = 1,
//                                                .backward_weight = 1});
//   std::cout << sim.bubble_fraction << "\n" << format_timeline(s, simulate(s));
//
// Everything here is a pure function of its arguments: thread-safe, never blocks. Errors are
// weft::InvalidArgument with a message that names the bad input.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace weft::parallel {

// PyTorch's _ComputationType values that weft schedules use (UNSHARD, RESHARD, REDUCE_GRAD and
// OVERLAP_F_B belong to FSDP and DualPipeV, which are not built here).
enum class ActionKind {
  kForward,         // "F"
  kFullBackward,    // "B"
  kBackwardInput,   // "I"
  kBackwardWeight,  // "W"
  kSendF,           // "SEND_F"
  kRecvF,           // "RECV_F"
  kSendB,           // "SEND_B"
  kRecvB,           // "RECV_B"
};

std::string_view kind_name(ActionKind kind);  // "F", "B", ..., "RECV_B"
bool is_compute(ActionKind kind);             // F, B, I or W

struct Action {
  int stage = 0;  // global stage index
  ActionKind kind = ActionKind::kForward;
  int microbatch = 0;

  bool operator==(const Action&) const = default;
};

// PyTorch's _Action.__repr__: stage, kind, micro-batch ("2I3", "0SEND_F1").
std::string to_string(const Action& action);
std::ostream& operator<<(std::ostream& os, const Action& action);
// PyTorch's _Action.from_str for these kinds: surrounding whitespace is ignored; the whole text
// must be [stage][kind][micro-batch]. Stricter than PyTorch, which accepts trailing text and a
// missing micro-batch (meaningful only for its FSDP kinds). Throws InvalidArgument quoting it.
Action parse_action(std::string_view text);

struct Schedule {
  int ranks = 0;
  int stages_per_rank = 0;
  int microbatches = 0;
  std::vector<int> stage_to_rank;            // [stage] -> rank; ranks * stages_per_rank entries
  std::vector<std::vector<Action>> actions;  // [rank] -> its actions in execution order

  int num_stages() const { return ranks * stages_per_rank; }
  // Whether any action is a SEND or RECV: then every transfer between ranks must be explicit.
  bool has_communication() const;
  bool operator==(const Schedule&) const = default;
};

// Stage s on rank s % ranks.
std::vector<int> loop_placement(int ranks, int stages_per_rank);
// PyTorch's "v" style: stages go down the ranks, then back up (with 2 per rank, rank r holds
// r and 2·ranks-1-r).
std::vector<int> v_placement(int ranks, int stages_per_rank);

// The schedules of TorchTitan's parallelism.pipeline_parallel_schedule, by PyTorch's names.
enum class ScheduleKind { kGPipe, k1F1B, kInterleaved1F1B, kInterleavedZeroBubble, kZBVZeroBubble };

std::string_view schedule_name(ScheduleKind kind);  // "GPipe", "1F1B", ...
// Case-insensitive, as PyTorch's get_schedule_class; InvalidArgument lists the valid names.
ScheduleKind parse_schedule_kind(std::string_view name);

// The generators return compute-only schedules, following PyTorch's generation (warm-up,
// steady 1F1B and cool-down counts) action for action, idle slots left out. Every count must
// be positive; the other requirements are PyTorch's, and InvalidArgument states the one broken:
//   GPipe                  1 stage per rank. All forwards, then all backwards.
//   1F1B                   1 stage per rank, microbatches >= ranks. Rank r runs ranks-r
//                          forwards, then alternates backward and forward, then drains.
//   Interleaved1F1B        any stages per rank (TorchTitan uses 2), loop layout; micro-batches
//                          go in rounds of microbatches / rounds, rounds = max(1, microbatches /
//                          ranks), which must divide microbatches (PyTorch's "flexible"
//                          interleaving; a multiple of ranks always qualifies).
//   InterleavedZeroBubble  as Interleaved1F1B, with I and W instead of B (PyTorch's ZB1P).
//   ZBVZeroBubble          exactly 2 stages per rank, V layout; any micro-batch count.
Schedule schedule_gpipe(int ranks, int stages_per_rank, int microbatches);
Schedule schedule_1f1b(int ranks, int stages_per_rank, int microbatches);
Schedule schedule_interleaved_1f1b(int ranks, int stages_per_rank, int microbatches);
Schedule schedule_interleaved_zero_bubble(int ranks, int stages_per_rank, int microbatches);
Schedule schedule_zbv_zero_bubble(int ranks, int stages_per_rank, int microbatches);
Schedule make_schedule(ScheduleKind kind, int ranks, int stages_per_rank, int microbatches);

// PyTorch's _add_send_recv: after each F whose next stage lives on another rank, a SEND_F on
// this rank and the matching RECV_F on the next stage's; after each B or I whose previous stage
// lives on another rank, a SEND_B here and a RECV_B there. A RECV is placed where PyTorch's
// lowering places it (the ranks advance one compute action per round, in rank order, each once
// its input is there). `compute_only` must pass validate() and hold no SEND/RECV.
Schedule add_send_recv(const Schedule& compute_only);

// The CSV of PyTorch's _dump_csv and _load_csv: one row per rank, one action per cell in the
// string form above, rows ending in "\r\n" as Python's csv.writer writes them ("\n" is read too).
// Reading skips empty cells (PyTorch's idle slots), takes ranks from the number of rows, each
// stage's rank from the row it appears in, stages_per_rank from their count and microbatches
// as the largest index + 1. It checks the format only: call validate() before using the
// schedule. InvalidArgument names the row, column (both from 1) and text of a bad cell, or a
// stage found in two rows.
Schedule read_schedule_csv(std::string_view text);
std::string write_schedule_csv(const Schedule& schedule);

// Throws InvalidArgument naming the first bad action ("rank 1, action 4 (1B0): ...") when:
//   - the counts or stage_to_rank are inconsistent, or an action's stage or micro-batch is out
//     of range, or it is on a rank that does not hold its stage;
//   - an action appears twice; a B or I comes before its F on that rank, a W before its I, a
//     SEND before the action it sends; a stage has both B and I for one micro-batch;
//   - some (stage, micro-batch) lacks its F, or its backward (one B, or one I and one W);
//   - a SEND or RECV has no peer stage on another rank, or no matching RECV/SEND there; in a
//     compute+comms schedule, an F or B/I that needs data from another rank has no RECV
//     before it;
//   - the schedule deadlocks. Each rank runs its list in order; a RECV holds its rank until
//     the peer has run the matching SEND (as PyTorch's _simulate_comms_compute has it: a
//     schedule that passes runs on blocking receives too); an F of stage s > 0 waits for stage
//     s-1's output (its F on this rank, else this rank's RECV_F); a B or I of stage s < S-1 for
//     stage s+1's input gradient (its B or I on this rank, else a RECV_B). In a compute-only
//     schedule the data of another rank's action is there as soon as that action has run. If no
//     rank can go on while some have actions left, the message names each stuck action and what it
//     waits for.
void validate(const Schedule& schedule);

// Costs in any unit of time. SEND and RECV take no time of their own.
struct ActionCosts {
  double forward = 1;
  double backward_input = 1;            // I
  double backward_weight = 1;           // W
  std::optional<double> full_backward;  // B; unset: backward_input + backward_weight
  double transfer_latency = 0;          // from a producer's end to the data on another rank
};

struct Simulation {
  std::vector<std::vector<double>> start;  // [rank][i]: when schedule.actions[rank][i] starts
  std::vector<std::vector<double>> end;    // ... and ends
  std::vector<double> finish;              // [rank]: when its last action ends
  std::vector<double> busy;                // [rank]: time spent in F, B, I and W
  std::vector<double> idle_fraction;       // [rank]: 1 - busy / makespan
  double makespan = 0;                     // the latest finish
  double bubble_fraction = 0;              // 1 - sum(busy) / (ranks * makespan)
};

// Runs each rank's list in order, each action as early as its rank and its data allow: a
// compute action starts when its rank is free and its input is there (the producer's end,
// plus transfer_latency when the producer is on another rank). A SEND is instant after its
// producer. A RECV completes at the SEND's time plus transfer_latency, and the F or B/I that
// reads it waits for that; the RECV itself does not hold its rank (its start and end are when
// the rank posts it), because PyTorch's runtime posts it as an irecv and waits at the
// consumer. So a compute+comms schedule simulates as its compute-only form. (validate()'s
// stricter blocking RECV would cost more where PyTorch's lowering posts a RECV early: 1F1B on
// 4 ranks with 8 micro-batches would have a bubble of 0.47 instead of 0.27.) Validates first;
// InvalidArgument for a negative cost.
Simulation simulate(const Schedule& schedule, const ActionCosts& costs = {});
// The same with each rank's own costs (per_rank[r] for rank r's actions; a transfer's latency
// is its receiver's): stages of unequal work, as measured.
Simulation simulate(const Schedule& schedule, const std::vector<ActionCosts>& per_rank);

// [rank]: the most micro-batches whose activations the rank holds at once, over the schedule:
// Fs run minus backwards completed (a B, or a W: the weight gradient still reads them).
std::vector<int> max_in_flight(const Schedule& schedule);

// A text timeline of a simulation: one line per rank, one column per `unit` of time. A column
// shows the compute action running at its midpoint: its label in the action's first column
// ("F3", "B0"; with several stages per rank the stage too, "2F3"), '-' in the others; '.' is
// idle. SEND and RECV take no time and do not show. Choose a unit that divides every cost.
//
//   rank 0 | F0 F1 .. .. .. B0 -- B1 --
//   rank 1 | .. F0 F1 B0 -- B1 -- .. ..
std::string format_timeline(const Schedule& schedule, const Simulation& simulation,
                            double unit = 1);

}  // namespace weft::parallel
