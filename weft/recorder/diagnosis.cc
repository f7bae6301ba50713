#include "weft/recorder/diagnosis.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace weft::recorder {
namespace {

// One rank's view of one group: its collectives there, by sequence number.
struct Member {
  const RankView* rank;
  std::vector<const OpRecord*> ops;  // ascending seq (records are oldest first)
};

struct GroupView {
  std::string name;
  int size = 0;
  std::vector<Member> members;
};

std::map<std::uint32_t, GroupView> groups_of(const std::vector<RankView>& ranks) {
  std::map<std::uint32_t, GroupView> groups;
  for (const RankView& rank : ranks) {
    if (!rank.ring) continue;
    const RingSnapshot& ring = *rank.ring;
    std::map<std::uint32_t, std::vector<const OpRecord*>> ops;
    for (const OpRecord& r : ring.records) {
      if (r.collective && r.group >= 0)
        ops[ring.groups[static_cast<std::size_t>(r.group)].id].push_back(&r);
    }
    for (const GroupInfo& g : ring.groups) {
      if (g.name.empty()) continue;
      GroupView& view = groups[g.id];
      view.name = g.name;
      view.size = g.size;
      view.members.push_back({&rank, ops[g.id]});
    }
  }
  return groups;
}

std::string seconds_ago(std::int64_t then_ns, std::int64_t now_ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s ago", static_cast<double>(now_ns - then_ns) / 1e9);
  return text;
}

// "#5 all_reduce(count=4, dtype=float32, op=sum) (started 10.2 s ago, at 'step 3')"
// " (started 10.2 s ago, at 'step 3')"
std::string describe_state(const OpRecord& r, std::int64_t now_ns) {
  std::string out = " (";
  out += state_name(r.state);
  if (r.state == OpState::kIssued || r.state == OpState::kStarted) {
    out += ' ';
    out += seconds_ago(r.state == OpState::kStarted ? r.started_ns : r.issued_ns, now_ns);
  }
  if (!r.site.empty()) {
    out += ", at '";
    out += r.site;
    out += '\'';
  }
  out += ')';
  return out;
}

// "#5 all_reduce(count=4, dtype=float32, op=sum) (started 10.2 s ago, at 'step 3')"
std::string describe(const OpRecord& r, std::int64_t now_ns) {
  std::string out = "#";
  out += std::to_string(r.seq);
  out += ' ';
  out += r.call();
  out += describe_state(r, now_ns);
  return out;
}

std::string rank_list(const std::vector<const Member*>& members) {
  std::string out = members.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(members[i]->rank->rank);
  }
  return out;
}

std::string status_of(const Member& m) {
  return m.rank->status.empty()
             ? ""
             : " (rank " + std::to_string(m.rank->rank) + " " + m.rank->status + ")";
}

// The first sequence number at which two members' calls differ.
std::optional<std::string> diverged(const GroupView& g) {
  std::map<std::uint64_t, std::vector<std::pair<const Member*, const OpRecord*>>> by_seq;
  for (const Member& m : g.members) {
    for (const OpRecord* r : m.ops) by_seq[r->seq].emplace_back(&m, r);
  }
  for (const auto& [seq, calls] : by_seq) {
    const bool agree = std::all_of(calls.begin(), calls.end(), [&](const auto& c) {
      return c.second->same_call(*calls[0].second);
    });
    if (agree) continue;
    std::string line =
        "ranks diverged on group '" + g.name + "' at collective #" + std::to_string(seq) + ":";
    for (const auto& [m, r] : calls) {
      line += " rank " + std::to_string(m->rank->rank) + " called " + r->call() +
              (r->site.empty() ? "" : " at '" + r->site + "'") + ";";
    }
    line.back() = '.';
    return line;
  }
  return std::nullopt;
}

// Members whose last collective on the group comes before the others' last.
std::optional<std::string> behind(const GroupView& g, std::int64_t now_ns) {
  const auto last_seq = [](const Member& m) -> std::int64_t {
    return m.ops.empty() ? -1 : static_cast<std::int64_t>(m.ops.back()->seq);
  };
  std::int64_t frontier = -1;
  for (const Member& m : g.members) frontier = std::max(frontier, last_seq(m));
  std::vector<const Member*> late, waiting;
  for (const Member& m : g.members) (last_seq(m) < frontier ? late : waiting).push_back(&m);
  if (late.empty()) return std::nullopt;
  std::string line =
      rank_list(late) + (late.size() == 1 ? " is" : " are") + " behind on group '" + g.name + "': ";
  for (const Member* m : late) {
    line += m->ops.empty()
                ? "rank " + std::to_string(m->rank->rank) + " has made no collective call there"
                : "rank " + std::to_string(m->rank->rank) + "'s last collective there is " +
                      describe(*m->ops.back(), now_ns);
    line += status_of(*m) + "; ";
  }
  line += rank_list(waiting) + " reached " + describe(*waiting[0]->ops.back(), now_ns);
  return line;
}

// Each rank's last point-to-point operation, when it did not complete.
std::optional<std::string> pending_point_to_point(const std::vector<RankView>& ranks,
                                                  std::int64_t now_ns) {
  std::string line;
  for (const RankView& rank : ranks) {
    if (!rank.ring) continue;
    const auto& records = rank.ring->records;
    const auto last = std::find_if(records.rbegin(), records.rend(),
                                   [](const OpRecord& r) { return !r.collective; });
    if (last == records.rend() || last->state == OpState::kCompleted) continue;
    std::string group;
    if (last->group >= 0)
      group = " on group '" + rank.ring->groups[static_cast<std::size_t>(last->group)].name + "'";
    line += (line.empty() ? "" : "; ");
    line += "rank " + std::to_string(rank.rank) + " in " + last->call() + group;
    line += describe_state(*last, now_ns);
  }
  if (line.empty()) return std::nullopt;
  return "point-to-point operations that did not complete: " + line;
}

}  // namespace

std::vector<std::string> diagnose(const std::vector<RankView>& ranks, std::int64_t now_ns) {
  std::vector<std::string> lines;
  if (std::none_of(ranks.begin(), ranks.end(),
                   [](const RankView& r) { return r.ring.has_value(); }))
    return lines;  // not a job of weft programs: nothing to say
  const auto groups = groups_of(ranks);
  for (const auto& [id, g] : groups) {
    if (auto line = diverged(g)) lines.push_back("flight recorder: " + *line);
  }
  for (const auto& [id, g] : groups) {
    if (auto line = behind(g, now_ns)) lines.push_back("flight recorder: " + *line);
  }
  if (auto line = pending_point_to_point(ranks, now_ns))
    lines.push_back("flight recorder: " + *line);
  for (const RankView& rank : ranks) {
    if (!rank.ring) {
      lines.push_back("flight recorder: rank " + std::to_string(rank.rank) +
                      " recorded nothing (not a weft program, or it never started)");
    }
  }
  // Said only when some rank was still in (or failed in) a collective: otherwise the job
  // stopped outside communication, which the ranks' own errors tell.
  const auto unfinished = [](const RankView& r) {
    return r.ring &&
           std::any_of(r.ring->records.begin(), r.ring->records.end(),
                       [](const OpRecord& op) { return op.state != OpState::kCompleted; });
  };
  if (lines.empty() && std::any_of(ranks.begin(), ranks.end(), unfinished)) {
    lines.push_back(
        "flight recorder: every rank made the same collective calls on every group, and each "
        "reached the same last one: the stop was not in a collective");
  }
  return lines;
}

}  // namespace weft::recorder
