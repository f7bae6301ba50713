#include "weft/parallel/pipeline_schedule.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>

#include "weft/base/check.h"
#include "weft/base/error.h"

namespace weft::parallel {
namespace {

constexpr int kKinds = 8;
// Indexed by ActionKind; this order is also the order in which parse_action tries the names
// (none is a prefix of another, so the order does not change what parses).
constexpr std::array<std::string_view, kKinds> kKindNames = {
    "F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
constexpr std::string_view kActionFormat =
    "write [stage][kind][micro-batch], e.g. 2F0 or 1SEND_F3, with kind F, B, I, W, SEND_F, "
    "RECV_F, SEND_B or RECV_B";

int kind_index(ActionKind kind) { return static_cast<int>(kind); }

bool is_backward(ActionKind kind) {
  return kind == ActionKind::kFullBackward || kind == ActionKind::kBackwardInput;
}

std::string_view trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n\f\v";  // Python's str.strip()
  const std::size_t first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kSpace) - first + 1);
}

// A non-negative decimal number that fills `text` and fits an int.
std::optional<int> parse_index(std::string_view text) {
  if (text.empty() ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<Action> try_parse_action(std::string_view text) {
  text = trim(text);
  const std::size_t digits = text.find_first_not_of("0123456789");
  if (digits == 0 || digits == std::string_view::npos) return std::nullopt;
  const std::optional<int> stage = parse_index(text.substr(0, digits));
  if (!stage) return std::nullopt;
  const std::string_view rest = text.substr(digits);
  for (int k = 0; k < kKinds; ++k) {
    if (!rest.starts_with(kKindNames[k])) continue;
    const std::optional<int> microbatch = parse_index(rest.substr(kKindNames[k].size()));
    if (microbatch) return Action{*stage, static_cast<ActionKind>(k), *microbatch};
  }
  return std::nullopt;
}

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

// ---------------------------------------------------------------------------------------------
// What actions wait for. Running an action publishes an event (its data is there); an action
// waits for at most one event. Validation, simulation and lowering all use these rules.

enum class Event { kOutput, kInputGrad, kSentF, kReceivedF, kSentB, kReceivedB };
constexpr int kEvents = 6;

struct EventKey {
  Event event;
  int stage;
  int microbatch;
};

// W publishes nothing: no other action reads the weight gradient.
std::optional<Event> event_of(ActionKind kind) {
  constexpr std::array<std::optional<Event>, kKinds> kEventOf = {
      Event::kOutput, Event::kInputGrad, Event::kInputGrad, std::nullopt,
      Event::kSentF,  Event::kReceivedF, Event::kSentB,     Event::kReceivedB};
  return kEventOf[kind_index(kind)];
}

// When each event happened; NaN while it has not.
class EventTimes {
 public:
  EventTimes(int stages, int microbatches)
      : stages_(stages),
        microbatches_(microbatches),
        times_(std::size_t(kEvents) * stages * microbatches,
               std::numeric_limits<double>::quiet_NaN()) {}

  bool has(const EventKey& key) const { return !std::isnan(times_[index(key)]); }
  double at(const EventKey& key) const { return times_[index(key)]; }
  void set(const EventKey& key, double time) { times_[index(key)] = time; }

 private:
  std::size_t index(const EventKey& key) const {
    return (std::size_t(key.event) * stages_ + key.stage) * microbatches_ + key.microbatch;
  }

  int stages_, microbatches_;
  std::vector<double> times_;
};

struct Need {
  EventKey key;
  bool crosses_ranks;  // the data travels from another rank (transfer latency applies)
};

// How data crosses between ranks.
enum class Transfers {
  kImplicit,      // compute-only: there as soon as the producer has run
  kBlockingRecv,  // validate(): a RECV holds its rank until the SEND has run
  kPostedRecv,    // simulate(): a RECV is posted and the rank goes on, as PyTorch's runtime
                  // posts an irecv; the action that reads the data waits for it
};

// An F's or B/I's input from the neighbouring stage `from`, which produced it (`produced`),
// sent it (`sent`), and this stage received it (`received`). On the same rank it is the
// neighbour's action itself.
Need neighbour_input(const Schedule& s, const Action& a, int from, Event produced, Event sent,
                     Event received, Transfers transfers) {
  if (s.stage_to_rank[from] == s.stage_to_rank[a.stage])
    return {{produced, from, a.microbatch}, false};
  switch (transfers) {
    case Transfers::kImplicit:
      return {{produced, from, a.microbatch}, true};
    case Transfers::kBlockingRecv:
      return {{received, a.stage, a.microbatch}, false};
    case Transfers::kPostedRecv:
      return {{sent, from, a.microbatch}, true};
  }
  WEFT_CHECK(false);
  return {};
}

std::optional<Need> need_of(const Schedule& s, const Action& a, Transfers transfers) {
  const int last = s.num_stages() - 1;
  auto local = [&](Event event) { return Need{{event, a.stage, a.microbatch}, false}; };
  switch (a.kind) {
    case ActionKind::kForward:
      if (a.stage == 0) return std::nullopt;
      return neighbour_input(s, a, a.stage - 1, Event::kOutput, Event::kSentF, Event::kReceivedF,
                             transfers);
    case ActionKind::kFullBackward:
    case ActionKind::kBackwardInput:
      if (a.stage == last) return local(Event::kOutput);  // the loss needs the forward
      return neighbour_input(s, a, a.stage + 1, Event::kInputGrad, Event::kSentB, Event::kReceivedB,
                             transfers);
    case ActionKind::kBackwardWeight:
    case ActionKind::kSendB:
      return local(Event::kInputGrad);
    case ActionKind::kSendF:
      return local(Event::kOutput);
    case ActionKind::kRecvF:
      if (transfers == Transfers::kPostedRecv) return std::nullopt;
      return Need{{Event::kSentF, a.stage - 1, a.microbatch}, true};
    case ActionKind::kRecvB:
      if (transfers == Transfers::kPostedRecv) return std::nullopt;
      return Need{{Event::kSentB, a.stage + 1, a.microbatch}, true};
  }
  WEFT_CHECK(false);
  return std::nullopt;
}

std::string describe(const Schedule& s, const EventKey& key) {
  constexpr std::array<ActionKind, kEvents> kPublisher = {
      ActionKind::kForward, ActionKind::kFullBackward, ActionKind::kSendF,
      ActionKind::kRecvF,   ActionKind::kSendB,        ActionKind::kRecvB};
  const Action publisher{key.stage, kPublisher[int(key.event)], key.microbatch};
  std::string text = to_string(publisher);
  if (key.event == Event::kInputGrad)
    text += " (or " + to_string({key.stage, ActionKind::kBackwardInput, key.microbatch}) + ")";
  return text + " on rank " + std::to_string(s.stage_to_rank[key.stage]);
}

double cost_of(ActionKind kind, const ActionCosts& costs) {
  switch (kind) {
    case ActionKind::kForward:
      return costs.forward;
    case ActionKind::kFullBackward:
      return costs.full_backward.value_or(costs.backward_input + costs.backward_weight);
    case ActionKind::kBackwardInput:
      return costs.backward_input;
    case ActionKind::kBackwardWeight:
      return costs.backward_weight;
    default:
      return 0;
  }
}

struct Timing {
  std::vector<std::vector<double>> start, end;
};

// Runs rank r's next actions for as long as what they wait for has happened; returns how many
// ran. Each starts when the rank is free and its input is there, so the times do not depend on
// the order in which the ranks are advanced.
std::size_t advance(const Schedule& s, int r, Transfers transfers,
                    const std::vector<ActionCosts>& per_rank, EventTimes& events, Timing& t) {
  const ActionCosts& costs = per_rank[static_cast<std::size_t>(r)];
  const std::vector<Action>& list = s.actions[r];
  std::size_t ran = 0;
  while (t.start[r].size() < list.size()) {
    const Action& a = list[t.start[r].size()];
    const std::optional<Need> need = need_of(s, a, transfers);
    if (need && !events.has(need->key)) break;
    double begin = t.end[r].empty() ? 0 : t.end[r].back();
    if (need) {
      const double latency = need->crosses_ranks ? costs.transfer_latency : 0;
      begin = std::max(begin, events.at(need->key) + latency);
    }
    const double finish = begin + cost_of(a.kind, costs);
    t.start[r].push_back(begin);
    t.end[r].push_back(finish);
    if (const std::optional<Event> e = event_of(a.kind))
      events.set({*e, a.stage, a.microbatch}, finish);
    ++ran;
  }
  return ran;
}

std::string where(int rank, std::size_t index, const Action& a) {
  return "rank " + std::to_string(rank) + ", action " + std::to_string(index) + " (" +
         to_string(a) + ")";
}

std::string deadlock_message(const Schedule& s, const Timing& t, Transfers transfers) {
  std::string stuck;
  for (int r = 0; r < s.ranks; ++r) {
    const std::size_t i = t.start[r].size();
    if (i == s.actions[r].size()) continue;
    const Action& a = s.actions[r][i];
    stuck += (stuck.empty() ? "" : "; ") + where(r, i, a) + " waits for " +
             describe(s, need_of(s, a, transfers)->key);
  }
  return "validate: the schedule deadlocks: " + stuck;
}

// Every rank's list in order, as validate() describes; throws on a deadlock.
Timing run(const Schedule& s, const std::vector<ActionCosts>& costs, Transfers transfers) {
  EventTimes events(s.num_stages(), s.microbatches);
  Timing t{std::vector<std::vector<double>>(s.ranks), std::vector<std::vector<double>>(s.ranks)};
  std::size_t left = 0;
  for (const auto& list : s.actions) left += list.size();
  while (left > 0) {
    std::size_t ran = 0;
    for (int r = 0; r < s.ranks; ++r) ran += advance(s, r, transfers, costs, events, t);
    if (ran == 0) throw InvalidArgument(deadlock_message(s, t, transfers));
    left -= ran;
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
// Validation before the run: layout, then each action in order, then what is missing.

[[noreturn]] void fail(const std::string& message) {
  throw InvalidArgument("validate: " + message);
}

void check_layout(const Schedule& s) {
  if (s.ranks < 1 || s.stages_per_rank < 1 || s.microbatches < 1) {
    fail("ranks, stages_per_rank and microbatches must be positive; got " +
         std::to_string(s.ranks) + ", " + std::to_string(s.stages_per_rank) + ", " +
         std::to_string(s.microbatches));
  }
  if (int(s.stage_to_rank.size()) != s.num_stages()) {
    fail("stage_to_rank has " + std::to_string(s.stage_to_rank.size()) + " entries for " +
         std::to_string(s.num_stages()) + " stages");
  }
  std::vector<int> held(s.ranks, 0);
  for (int stage = 0; stage < s.num_stages(); ++stage) {
    const int r = s.stage_to_rank[stage];
    if (r < 0 || r >= s.ranks)
      fail("stage " + std::to_string(stage) + " is placed on rank " + std::to_string(r) + " of " +
           std::to_string(s.ranks));
    ++held[r];
  }
  for (int r = 0; r < s.ranks; ++r) {
    if (held[r] != s.stages_per_rank)
      fail("rank " + std::to_string(r) + " holds " + std::to_string(held[r]) +
           " stages, not stages_per_rank = " + std::to_string(s.stages_per_rank));
  }
  if (int(s.actions.size()) != s.ranks)
    fail("there are " + std::to_string(s.actions.size()) + " action lists for " +
         std::to_string(s.ranks) + " ranks");
  // Each (stage, micro-batch) needs two actions at least; this also bounds the tables below.
  std::size_t total = 0;
  for (const auto& list : s.actions) total += list.size();
  if (std::size_t(s.num_stages()) * s.microbatches > total)
    fail(std::to_string(s.num_stages()) + " stages x " + std::to_string(s.microbatches) +
         " micro-batches need " + std::to_string(2L * s.num_stages() * s.microbatches) +
         " actions at least; the schedule has " + std::to_string(total));
}

// Where each (kind, stage, micro-batch) ran on its stage's rank: its index there, or -1.
class ActionTable {
 public:
  ActionTable(int stages, int microbatches)
      : stages_(stages),
        microbatches_(microbatches),
        index_(std::size_t(kKinds) * stages * microbatches, -1) {}

  bool has(ActionKind kind, int stage, int microbatch) const {
    return index_[slot(kind, stage, microbatch)] >= 0;
  }
  long index(ActionKind kind, int stage, int microbatch) const {
    return index_[slot(kind, stage, microbatch)];
  }
  void mark(const Action& a, long index) { index_[slot(a.kind, a.stage, a.microbatch)] = index; }

 private:
  std::size_t slot(ActionKind kind, int stage, int microbatch) const {
    return (std::size_t(kind_index(kind)) * stages_ + stage) * microbatches_ + microbatch;
  }

  int stages_, microbatches_;
  std::vector<long> index_;
};

// The stage a SEND or RECV exchanges data with.
int peer_stage(const Action& a) {
  const bool toward_next = a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvB;
  return toward_next ? a.stage + 1 : a.stage - 1;
}

std::optional<std::string> bad_placement(const Schedule& s, int rank, const Action& a) {
  const int stages = s.num_stages();
  if (a.stage < 0 || a.stage >= stages)
    return "stage out of range: the schedule has " + std::to_string(stages) + " stages";
  if (a.microbatch < 0 || a.microbatch >= s.microbatches)
    return "micro-batch out of range: the schedule has " + std::to_string(s.microbatches);
  if (s.stage_to_rank[a.stage] != rank)
    return "stage " + std::to_string(a.stage) + " is on rank " +
           std::to_string(s.stage_to_rank[a.stage]) + ", not this one";
  if (is_compute(a.kind)) return std::nullopt;
  const int peer = peer_stage(a);
  if (peer < 0 || peer >= stages)
    return "stage " + std::to_string(a.stage) + " has no stage " + std::to_string(peer) +
           " to exchange data with";
  if (s.stage_to_rank[peer] == rank)
    return "stages " + std::to_string(a.stage) + " and " + std::to_string(peer) +
           " are both on this rank, which passes their data without SEND or RECV";
  return std::nullopt;
}

// In a compute+comms schedule, the RECV an F or B/I needs before it, if its input comes from
// another rank.
std::optional<ActionKind> required_recv(const Schedule& s, const Action& a) {
  if (a.kind == ActionKind::kForward && a.stage > 0 &&
      s.stage_to_rank[a.stage - 1] != s.stage_to_rank[a.stage])
    return ActionKind::kRecvF;
  if (is_backward(a.kind) && a.stage < s.num_stages() - 1 &&
      s.stage_to_rank[a.stage + 1] != s.stage_to_rank[a.stage])
    return ActionKind::kRecvB;
  return std::nullopt;
}

// What must have run on this rank before `a`, if it has not.
std::optional<std::string> missing_before(const ActionTable& ran, const Action& a) {
  auto has = [&](ActionKind kind) { return ran.has(kind, a.stage, a.microbatch); };
  if (is_backward(a.kind)) {
    if (!has(ActionKind::kForward)) return "it comes before its F";
    const ActionKind other = a.kind == ActionKind::kFullBackward ? ActionKind::kBackwardInput
                                                                 : ActionKind::kFullBackward;
    if (has(other))
      return "this micro-batch already ran a " + std::string(kind_name(other)) +
             " here; its backward is one B, or one I and one W";
  }
  if (a.kind == ActionKind::kBackwardWeight) {
    if (has(ActionKind::kFullBackward)) return "it follows a full B; a W goes with an I";
    if (!has(ActionKind::kBackwardInput)) return "it comes before its I";
  }
  if (a.kind == ActionKind::kSendF && !has(ActionKind::kForward))
    return "it comes before the F whose output it sends";
  if (a.kind == ActionKind::kSendB && !has(ActionKind::kFullBackward) &&
      !has(ActionKind::kBackwardInput))
    return "it comes before the B or I whose gradient it sends";
  return std::nullopt;
}

void check_actions(const Schedule& s, ActionTable& ran) {
  for (int r = 0; r < s.ranks; ++r) {
    for (std::size_t i = 0; i < s.actions[r].size(); ++i) {
      const Action& a = s.actions[r][i];
      if (std::optional<std::string> bad = bad_placement(s, r, a))
        fail(where(r, i, a) + ": " + *bad);
      if (ran.has(a.kind, a.stage, a.microbatch))
        fail(where(r, i, a) + ": it already ran at action " +
             std::to_string(ran.index(a.kind, a.stage, a.microbatch)));
      if (std::optional<std::string> bad = missing_before(ran, a))
        fail(where(r, i, a) + ": " + *bad);
      ran.mark(a, long(i));
    }
  }
}

void check_complete(const Schedule& s, const ActionTable& ran) {
  for (int stage = 0; stage < s.num_stages(); ++stage) {
    for (int mb = 0; mb < s.microbatches; ++mb) {
      const std::string what = "stage " + std::to_string(stage) + " micro-batch " +
                               std::to_string(mb) + " (on rank " +
                               std::to_string(s.stage_to_rank[stage]) + ")";
      if (!ran.has(ActionKind::kForward, stage, mb)) fail(what + " has no F");
      const bool input = ran.has(ActionKind::kBackwardInput, stage, mb);
      if (!ran.has(ActionKind::kFullBackward, stage, mb) && !input)
        fail(what + " has no backward: a B, or an I and a W");
      if (input && !ran.has(ActionKind::kBackwardWeight, stage, mb))
        fail(what + " has an I but no W");
    }
  }
}

// Each SEND has its RECV on the peer's rank and each RECV its SEND; then each F or B/I whose
// input comes from another rank has its RECV before it.
void check_matched(const Schedule& s, const ActionTable& ran) {
  constexpr std::array<std::pair<ActionKind, ActionKind>, 4> kMatch = {{
      {ActionKind::kSendF, ActionKind::kRecvF},
      {ActionKind::kRecvF, ActionKind::kSendF},
      {ActionKind::kSendB, ActionKind::kRecvB},
      {ActionKind::kRecvB, ActionKind::kSendB},
  }};
  for (int r = 0; r < s.ranks; ++r) {
    for (std::size_t i = 0; i < s.actions[r].size(); ++i) {
      const Action& a = s.actions[r][i];
      for (const auto& [kind, match] : kMatch) {
        if (a.kind != kind) continue;
        const Action peer{peer_stage(a), match, a.microbatch};
        if (!ran.has(peer.kind, peer.stage, peer.microbatch))
          fail(where(r, i, a) + ": rank " + std::to_string(s.stage_to_rank[peer.stage]) +
               " never runs the matching " + to_string(peer));
      }
    }
  }
  for (int r = 0; r < s.ranks; ++r) {
    for (std::size_t i = 0; i < s.actions[r].size(); ++i) {
      const Action& a = s.actions[r][i];
      const std::optional<ActionKind> recv = required_recv(s, a);
      if (!recv) continue;
      const long at = ran.index(*recv, a.stage, a.microbatch);
      if (at < 0 || at > long(i))
        fail(where(r, i, a) + ": its input comes from another rank, and no " +
             to_string({a.stage, *recv, a.microbatch}) + " comes before it");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Generators.

void check_counts(std::string_view schedule, int ranks, int stages_per_rank, int microbatches) {
  if (ranks < 1 || stages_per_rank < 1 || microbatches < 1) {
    throw InvalidArgument(std::string(schedule) +
                          ": ranks, stages per rank and micro-batches must be positive; got " +
                          std::to_string(ranks) + ", " + std::to_string(stages_per_rank) + ", " +
                          std::to_string(microbatches));
  }
}

void check_one_stage_per_rank(std::string_view schedule, int stages_per_rank) {
  if (stages_per_rank != 1) {
    throw InvalidArgument(std::string(schedule) +
                          " runs one stage per rank (PyTorch's PipelineScheduleSingle); got " +
                          std::to_string(stages_per_rank) +
                          " stages per rank: use Interleaved1F1B, InterleavedZeroBubble or "
                          "ZBVZeroBubble for more");
  }
}

Schedule empty_schedule(int ranks, int stages_per_rank, int microbatches,
                        std::vector<int> placement) {
  return {ranks, stages_per_rank, microbatches, std::move(placement),
          std::vector<std::vector<Action>>(ranks)};
}

// A rank's list being generated. Each (stage, kind) numbers its micro-batches in order, as
// PyTorch's generators count them.
class RankActions {
 public:
  explicit RankActions(int stages) : next_(stages) {}

  void add(int stage, ActionKind kind) {
    actions_.push_back({stage, kind, next_[stage][kind_index(kind)]++});
  }
  int count(int stage, ActionKind kind) const { return next_[stage][kind_index(kind)]; }
  std::vector<Action> take() && { return std::move(actions_); }

 private:
  std::vector<std::array<int, kKinds>> next_;
  std::vector<Action> actions_;
};

// PyTorch's interleaved schedules run micro-batches in rounds: rounds = max(1, m / ranks), which
// must divide m (its "flexible" interleaving, which lifts the paper's m % ranks == 0).
int microbatches_per_round(std::string_view schedule, int ranks, int microbatches) {
  const int rounds = std::max(1, microbatches / ranks);
  if (microbatches % rounds != 0) {
    throw InvalidArgument(
        std::string(schedule) + ": " + std::to_string(microbatches) + " micro-batches on " +
        std::to_string(ranks) +
        " ranks run in max(1, micro-batches / ranks) = " + std::to_string(rounds) +
        " rounds, which must divide the micro-batches (as PyTorch requires); "
        "a multiple of the ranks always does");
  }
  return microbatches / rounds;
}

// Which local stage an interleaved rank's op works on: a round of micro-batches at a time,
// forwards up the rank's stages and backwards (counted from the first backward op) down.
struct InterleavedStages {
  int rank, ranks, local_stages, per_round, warmup;

  int forward(int op) const { return (op / per_round) % local_stages * ranks + rank; }
  int backward(int op) const {
    return (local_stages - 1 - (op - warmup) / per_round % local_stages) * ranks + rank;
  }
};

// PyTorch's _get_1f1b_rank_ops without the idle slots: `warmup` forwards, then forward and
// backward pairs until the forwards are done, then the remaining backwards. With zero bubble a
// backward is an I, and from the rank-th backward on each I is followed by the W of the oldest
// backward still without one; the remaining Ws close the list.
std::vector<Action> interleaved_rank_actions(const InterleavedStages& st, int microbatches,
                                             int stages, bool zero_bubble) {
  RankActions out(stages);
  const int ops = st.local_stages * microbatches;
  const ActionKind backward = zero_bubble ? ActionKind::kBackwardInput : ActionKind::kFullBackward;
  std::vector<int> backward_ops;
  std::size_t weights = 0;
  auto add_weight = [&] {
    out.add(st.backward(backward_ops[weights++]), ActionKind::kBackwardWeight);
  };
  for (int op = 0; op < ops + st.warmup; ++op) {
    if (op < ops) out.add(st.forward(op), ActionKind::kForward);
    if (op < st.warmup) continue;
    out.add(st.backward(op), backward);
    backward_ops.push_back(op);
    if (zero_bubble && op - st.warmup >= st.rank) add_weight();
  }
  while (zero_bubble && weights < backward_ops.size()) add_weight();
  return std::move(out).take();
}

// warmup_factor: forwards added per hop from the last rank (PyTorch's multiply_factor: 2 for
// Interleaved1F1B, 1 for zero bubble, whose W fills the rest).
Schedule interleaved(std::string_view name, int ranks, int stages_per_rank, int microbatches,
                     int warmup_factor, bool zero_bubble) {
  check_counts(name, ranks, stages_per_rank, microbatches);
  const int per_round = microbatches_per_round(name, ranks, microbatches);
  Schedule s =
      empty_schedule(ranks, stages_per_rank, microbatches, loop_placement(ranks, stages_per_rank));
  for (int r = 0; r < ranks; ++r) {
    const int warmup = std::min((stages_per_rank - 1) * per_round + warmup_factor * (ranks - 1 - r),
                                microbatches * stages_per_rank);
    s.actions[r] = interleaved_rank_actions({r, ranks, stages_per_rank, per_round, warmup},
                                            microbatches, s.num_stages(), zero_bubble);
  }
  return s;
}

// PyTorch's ScheduleZBVZeroBubble for rank r, whose stages are `down` (r) and `up` (2p-1-r).
// It plans at least 2p-1 micro-batches, enough to fill the V, and then drops the extra ones.
std::vector<Action> zbv_rank_actions(int rank, int ranks, int microbatches) {
  using K = ActionKind;
  const int planned = std::max(2 * ranks - 1, microbatches);
  const int down = rank, up = 2 * ranks - 1 - rank;
  RankActions out(2 * ranks);
  for (int i = 0; i < 2 * (ranks - rank) - 1; ++i) out.add(down, K::kForward);
  for (int i = 0; i < rank; ++i) {
    out.add(up, K::kForward);
    out.add(down, K::kForward);
  }
  for (int i = 0; i < ranks - rank; ++i) {
    out.add(up, K::kForward);
    out.add(up, K::kBackwardInput);
    out.add(up, K::kBackwardWeight);
  }
  while (out.count(up, K::kForward) < out.count(down, K::kForward) ||
         out.count(down, K::kForward) < planned) {
    if (out.count(down, K::kForward) < planned) out.add(down, K::kForward);
    out.add(down, K::kBackwardInput);
    out.add(down, K::kBackwardWeight);
    out.add(up, K::kForward);
    out.add(up, K::kBackwardInput);
    out.add(up, K::kBackwardWeight);
  }
  for (int i = 0; i < rank; ++i) {
    out.add(down, K::kBackwardInput);
    out.add(up, K::kBackwardInput);
  }
  for (int i = 0; i < ranks - rank; ++i) {
    out.add(down, K::kBackwardInput);
    out.add(down, K::kBackwardWeight);
  }
  for (const int stage : {up, down}) {
    while (out.count(stage, K::kBackwardWeight) < out.count(stage, K::kBackwardInput))
      out.add(stage, K::kBackwardWeight);
  }
  std::vector<Action> actions = std::move(out).take();
  std::erase_if(actions, [&](const Action& a) { return a.microbatch >= microbatches; });
  return actions;
}

// After `a`, the SEND of its result and the RECV on the neighbour's rank, when that neighbour
// (the next stage for an F, the previous one for a B or I) lives on another rank.
void append_transfer(Schedule& s, const Action& a) {
  int peer;
  ActionKind send, recv;
  if (a.kind == ActionKind::kForward) {
    peer = a.stage + 1;
    send = ActionKind::kSendF;
    recv = ActionKind::kRecvF;
  } else if (is_backward(a.kind)) {
    peer = a.stage - 1;
    send = ActionKind::kSendB;
    recv = ActionKind::kRecvB;
  } else {
    return;
  }
  if (peer < 0 || peer >= s.num_stages()) return;
  const int from = s.stage_to_rank[a.stage], to = s.stage_to_rank[peer];
  if (from == to) return;
  s.actions[from].push_back({a.stage, send, a.microbatch});
  s.actions[to].push_back({peer, recv, a.microbatch});
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  std::size_t begin = 0;
  for (std::size_t at; (at = text.find(separator, begin)) != std::string_view::npos; begin = at + 1)
    parts.push_back(text.substr(begin, at - begin));
  parts.push_back(text.substr(begin));
  return parts;
}

std::string cell_at(std::size_t row, std::size_t column) {
  return "read_schedule_csv: row " + std::to_string(row + 1) + " (rank " + std::to_string(row) +
         "), column " + std::to_string(column + 1) + ": ";
}

// Each stage's rank from the rows its actions are in; every stage 0 .. S-1 must appear, and
// every rank must hold the same number.
std::vector<int> placement_from_rows(const std::map<int, int>& row_of_stage, int ranks) {
  const int stages = row_of_stage.rbegin()->first + 1;
  std::vector<int> placement(stages, -1);
  std::vector<int> held(ranks, 0);
  for (const auto& [stage, row] : row_of_stage) {
    placement[stage] = row;
    ++held[row];
  }
  for (int stage = 0; stage < stages; ++stage) {
    if (placement[stage] < 0)
      throw InvalidArgument("read_schedule_csv: no row holds stage " + std::to_string(stage) +
                            ", and stage " + std::to_string(stages - 1) + " appears");
  }
  for (int r = 1; r < ranks; ++r) {
    if (held[r] != held[0])
      throw InvalidArgument("read_schedule_csv: rank " + std::to_string(r) + " holds " +
                            std::to_string(held[r]) + " stages and rank 0 holds " +
                            std::to_string(held[0]) + "; every rank must hold the same number");
  }
  return placement;
}

std::string timeline_label(const Schedule& s, const Action& a) {
  const std::string kind_and_microbatch =
      std::string(kind_name(a.kind)) + std::to_string(a.microbatch);
  return s.stages_per_rank > 1 ? std::to_string(a.stage) + kind_and_microbatch
                               : kind_and_microbatch;
}

}  // namespace

std::string_view kind_name(ActionKind kind) { return kKindNames[kind_index(kind)]; }

bool is_compute(ActionKind kind) {
  return kind_index(kind) <= kind_index(ActionKind::kBackwardWeight);
}

std::string to_string(const Action& action) {
  return std::to_string(action.stage) + std::string(kind_name(action.kind)) +
         std::to_string(action.microbatch);
}

std::ostream& operator<<(std::ostream& os, const Action& action) { return os << to_string(action); }

Action parse_action(std::string_view text) {
  if (std::optional<Action> action = try_parse_action(text)) return *action;
  throw InvalidArgument(quoted(text) + " is not a pipeline action: " + std::string(kActionFormat));
}

bool Schedule::has_communication() const {
  for (const auto& list : actions) {
    for (const Action& a : list) {
      if (!is_compute(a.kind)) return true;
    }
  }
  return false;
}

std::vector<int> loop_placement(int ranks, int stages_per_rank) {
  std::vector<int> placement(ranks * stages_per_rank);
  for (int stage = 0; stage < int(placement.size()); ++stage) placement[stage] = stage % ranks;
  return placement;
}

std::vector<int> v_placement(int ranks, int stages_per_rank) {
  std::vector<int> placement(ranks * stages_per_rank);
  for (int stage = 0; stage < int(placement.size()); ++stage) {
    const int position = stage % ranks;
    placement[stage] = (stage / ranks) % 2 == 0 ? position : ranks - 1 - position;
  }
  return placement;
}

namespace {
constexpr std::array<std::pair<ScheduleKind, std::string_view>, 5> kScheduleNames = {{
    {ScheduleKind::kGPipe, "GPipe"},
    {ScheduleKind::k1F1B, "1F1B"},
    {ScheduleKind::kInterleaved1F1B, "Interleaved1F1B"},
    {ScheduleKind::kInterleavedZeroBubble, "InterleavedZeroBubble"},
    {ScheduleKind::kZBVZeroBubble, "ZBVZeroBubble"},
}};

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [&](char x, char y) { return lower(x) == lower(y); });
}
}  // namespace

std::string_view schedule_name(ScheduleKind kind) {
  for (const auto& [k, name] : kScheduleNames) {
    if (k == kind) return name;
  }
  WEFT_CHECK(false);
  return {};
}

ScheduleKind parse_schedule_kind(std::string_view name) {
  std::string valid;
  for (const auto& [kind, known] : kScheduleNames) {
    if (equal_ignoring_case(name, known)) return kind;
    valid += (valid.empty() ? "" : ", ") + std::string(known);
  }
  throw InvalidArgument("unknown pipeline schedule " + quoted(name) + "; the valid names are " +
                        valid);
}

Schedule schedule_gpipe(int ranks, int stages_per_rank, int microbatches) {
  check_counts("GPipe", ranks, stages_per_rank, microbatches);
  check_one_stage_per_rank("GPipe", stages_per_rank);
  Schedule s = empty_schedule(ranks, 1, microbatches, loop_placement(ranks, 1));
  for (int r = 0; r < ranks; ++r) {
    for (int mb = 0; mb < microbatches; ++mb) s.actions[r].push_back({r, ActionKind::kForward, mb});
    for (int mb = 0; mb < microbatches; ++mb)
      s.actions[r].push_back({r, ActionKind::kFullBackward, mb});
  }
  return s;
}

Schedule schedule_1f1b(int ranks, int stages_per_rank, int microbatches) {
  check_counts("1F1B", ranks, stages_per_rank, microbatches);
  check_one_stage_per_rank("1F1B", stages_per_rank);
  if (microbatches < ranks) {
    throw InvalidArgument("1F1B: " + std::to_string(microbatches) + " micro-batches for " +
                          std::to_string(ranks) +
                          " stages; it needs at least as many micro-batches as stages (as "
                          "PyTorch requires)");
  }
  Schedule s = empty_schedule(ranks, 1, microbatches, loop_placement(ranks, 1));
  for (int r = 0; r < ranks; ++r) {
    // Rank r runs ranks - r forwards before its first backward comes back: the last stage 1.
    int forwards = 0, backwards = 0;
    auto& list = s.actions[r];
    while (forwards < ranks - r) list.push_back({r, ActionKind::kForward, forwards++});
    while (forwards < microbatches) {
      list.push_back({r, ActionKind::kFullBackward, backwards++});
      list.push_back({r, ActionKind::kForward, forwards++});
    }
    while (backwards < microbatches) list.push_back({r, ActionKind::kFullBackward, backwards++});
  }
  return s;
}

Schedule schedule_interleaved_1f1b(int ranks, int stages_per_rank, int microbatches) {
  return interleaved("Interleaved1F1B", ranks, stages_per_rank, microbatches, 2, false);
}

Schedule schedule_interleaved_zero_bubble(int ranks, int stages_per_rank, int microbatches) {
  return interleaved("InterleavedZeroBubble", ranks, stages_per_rank, microbatches, 1, true);
}

Schedule schedule_zbv_zero_bubble(int ranks, int stages_per_rank, int microbatches) {
  check_counts("ZBVZeroBubble", ranks, stages_per_rank, microbatches);
  if (stages_per_rank != 2) {
    throw InvalidArgument("ZBVZeroBubble: needs exactly 2 stages per rank (the V); got " +
                          std::to_string(stages_per_rank));
  }
  Schedule s = empty_schedule(ranks, 2, microbatches, v_placement(ranks, 2));
  for (int r = 0; r < ranks; ++r) s.actions[r] = zbv_rank_actions(r, ranks, microbatches);
  return s;
}

Schedule make_schedule(ScheduleKind kind, int ranks, int stages_per_rank, int microbatches) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return schedule_gpipe(ranks, stages_per_rank, microbatches);
    case ScheduleKind::k1F1B:
      return schedule_1f1b(ranks, stages_per_rank, microbatches);
    case ScheduleKind::kInterleaved1F1B:
      return schedule_interleaved_1f1b(ranks, stages_per_rank, microbatches);
    case ScheduleKind::kInterleavedZeroBubble:
      return schedule_interleaved_zero_bubble(ranks, stages_per_rank, microbatches);
    case ScheduleKind::kZBVZeroBubble:
      return schedule_zbv_zero_bubble(ranks, stages_per_rank, microbatches);
  }
  WEFT_CHECK(false);
  return {};
}

// PyTorch's lowering goes in rounds: each rank in turn schedules its next compute action once
// that action's input is there (a RECV placed by the sender counts), appending the SEND here
// and the RECV at the end of the peer's list. Placing the RECVs from the sender's side, at the
// moment of sending, is what keeps the sends and receives of every pair of ranks in an order
// that cannot hang.
Schedule add_send_recv(const Schedule& compute_only) {
  if (compute_only.has_communication())
    throw InvalidArgument("add_send_recv: the schedule already has SEND/RECV actions");
  validate(compute_only);
  Schedule out = compute_only;
  for (auto& list : out.actions) list.clear();
  EventTimes done(compute_only.num_stages(), compute_only.microbatches);
  std::vector<std::size_t> next(compute_only.ranks, 0);
  std::size_t left = 0;
  for (const auto& list : compute_only.actions) left += list.size();
  while (left > 0) {
    std::size_t moved = 0;
    for (int r = 0; r < compute_only.ranks; ++r) {
      if (next[r] == compute_only.actions[r].size()) continue;
      const Action& a = compute_only.actions[r][next[r]];
      const std::optional<Need> need = need_of(compute_only, a, Transfers::kImplicit);
      if (need && !done.has(need->key)) continue;
      out.actions[r].push_back(a);
      if (const std::optional<Event> e = event_of(a.kind)) done.set({*e, a.stage, a.microbatch}, 0);
      append_transfer(out, a);
      ++next[r];
      ++moved;
    }
    WEFT_CHECK_GT(moved, 0u);  // validate() ruled out a deadlock
    left -= moved;
  }
  return out;
}

Schedule read_schedule_csv(std::string_view text) {
  std::vector<std::string_view> rows = split(text, '\n');
  if (rows.back().empty()) rows.pop_back();  // the line end of the last row
  if (rows.empty()) throw InvalidArgument("read_schedule_csv: no rows; write one row per rank");
  Schedule s;
  s.ranks = int(rows.size());
  s.actions.resize(rows.size());
  std::map<int, int> row_of_stage;
  int last_microbatch = -1;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::string_view row = rows[r];
    if (row.ends_with('\r')) row.remove_suffix(1);
    const std::vector<std::string_view> cells = split(row, ',');
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (trim(cells[c]).empty()) continue;  // an idle slot
      const std::optional<Action> a = try_parse_action(cells[c]);
      if (!a) {
        throw InvalidArgument(cell_at(r, c) + quoted(cells[c]) +
                              " is not a pipeline action: " + std::string(kActionFormat));
      }
      const auto [placed, fresh] = row_of_stage.emplace(a->stage, int(r));
      if (!fresh && placed->second != int(r)) {
        throw InvalidArgument(cell_at(r, c) + "stage " + std::to_string(a->stage) + " is in row " +
                              std::to_string(placed->second + 1) +
                              " too; a stage belongs to one rank");
      }
      last_microbatch = std::max(last_microbatch, a->microbatch);
      s.actions[r].push_back(*a);
    }
  }
  if (row_of_stage.empty()) throw InvalidArgument("read_schedule_csv: the rows hold no actions");
  s.stage_to_rank = placement_from_rows(row_of_stage, s.ranks);
  s.stages_per_rank = int(s.stage_to_rank.size()) / s.ranks;
  s.microbatches = last_microbatch + 1;
  return s;
}

std::string write_schedule_csv(const Schedule& schedule) {
  std::string csv;
  for (const auto& list : schedule.actions) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (i > 0) csv += ',';
      csv += to_string(list[i]);
    }
    csv += "\r\n";
  }
  return csv;
}

void validate(const Schedule& schedule) {
  check_layout(schedule);
  ActionTable ran(schedule.num_stages(), schedule.microbatches);
  check_actions(schedule, ran);
  check_complete(schedule, ran);
  if (schedule.has_communication()) check_matched(schedule, ran);
  run(schedule, std::vector<ActionCosts>(static_cast<std::size_t>(schedule.ranks)),
      schedule.has_communication() ? Transfers::kBlockingRecv : Transfers::kImplicit);
}

Simulation simulate(const Schedule& schedule, const ActionCosts& costs) {
  return simulate(schedule,
                  std::vector<ActionCosts>(static_cast<std::size_t>(schedule.ranks), costs));
}

Simulation simulate(const Schedule& schedule, const std::vector<ActionCosts>& per_rank) {
  validate(schedule);
  if (per_rank.size() != static_cast<std::size_t>(schedule.ranks)) {
    throw InvalidArgument("simulate: " + std::to_string(per_rank.size()) + " ranks' costs for " +
                          std::to_string(schedule.ranks) + " ranks");
  }
  for (const ActionCosts& costs : per_rank) {
    const double b = costs.full_backward.value_or(0);
    if (costs.forward < 0 || costs.backward_input < 0 || costs.backward_weight < 0 || b < 0 ||
        costs.transfer_latency < 0)
      throw InvalidArgument("simulate: costs and transfer latency must not be negative");
  }
  Timing t = run(schedule, per_rank,
                 schedule.has_communication() ? Transfers::kPostedRecv : Transfers::kImplicit);
  Simulation sim;
  for (int r = 0; r < schedule.ranks; ++r) {
    double busy = 0;
    for (const Action& a : schedule.actions[r])
      busy += cost_of(a.kind, per_rank[static_cast<std::size_t>(r)]);
    sim.busy.push_back(busy);
    sim.finish.push_back(t.end[r].empty() ? 0 : t.end[r].back());
    sim.makespan = std::max(sim.makespan, sim.finish.back());
  }
  double total_busy = 0;
  for (const double busy : sim.busy) {
    sim.idle_fraction.push_back(sim.makespan > 0 ? 1 - busy / sim.makespan : 0);
    total_busy += busy;
  }
  if (sim.makespan > 0) sim.bubble_fraction = 1 - total_busy / (schedule.ranks * sim.makespan);
  sim.start = std::move(t.start);
  sim.end = std::move(t.end);
  return sim;
}

std::vector<int> max_in_flight(const Schedule& schedule) {
  std::vector<int> most;
  for (const auto& list : schedule.actions) {
    int held = 0, peak = 0;
    for (const Action& a : list) {
      if (a.kind == ActionKind::kForward) peak = std::max(peak, ++held);
      if (a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardWeight) --held;
    }
    most.push_back(peak);
  }
  return most;
}

std::string format_timeline(const Schedule& schedule, const Simulation& simulation, double unit) {
  if (!(unit > 0)) throw InvalidArgument("format_timeline: unit must be positive");
  if (simulation.start.size() != schedule.actions.size())
    throw InvalidArgument("format_timeline: the simulation is of another schedule");
  std::size_t width = 1;
  for (const auto& list : schedule.actions) {
    for (const Action& a : list) {
      if (is_compute(a.kind)) width = std::max(width, timeline_label(schedule, a).size());
    }
  }
  // The small slack keeps a makespan of 9.000000001 units from opening a tenth column.
  const int columns = int(std::ceil(simulation.makespan / unit - 1e-9));
  const std::size_t rank_width = std::to_string(schedule.ranks - 1).size();
  std::string text;
  for (int r = 0; r < schedule.ranks; ++r) {
    std::vector<std::string> cells(columns, std::string(width, '.'));
    for (std::size_t i = 0; i < schedule.actions[r].size(); ++i) {
      const Action& a = schedule.actions[r][i];
      if (!is_compute(a.kind)) continue;
      // The columns whose midpoints (c + 1/2) * unit fall in [start, end).
      const int first = std::max(0, int(std::ceil(simulation.start[r][i] / unit - 0.5)));
      const int stop = std::min(columns, int(std::ceil(simulation.end[r][i] / unit - 0.5)));
      for (int c = first; c < stop; ++c) cells[c] = std::string(width, '-');
      if (first < stop) {
        cells[first] = timeline_label(schedule, a);
        cells[first].resize(width, ' ');
      }
    }
    std::string rank = std::to_string(r);
    text += "rank " + std::string(rank_width - rank.size(), ' ') + rank + " |";
    for (const std::string& cell : cells) text += " " + cell;
    text += "\n";
  }
  return text;
}

}  // namespace weft::parallel
