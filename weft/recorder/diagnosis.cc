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

std::string seconds(std::int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(ns) / 1e9);
  return text;
}

bool unfinished(const OpRecord& r) {
  return r.state == OpState::kIssued || r.state == OpState::kStarted;
}

// " (started 10.2 s ago, at 'step 3')"
std::string describe_state(const OpRecord& r, const RankView& rank) {
  std::string out = " (";
  out += state_name(r.state);
  if (unfinished(r)) {
    const std::int64_t since = r.state == OpState::kStarted ? r.started_ns : r.issued_ns;
    out += ' ' + seconds(rank.read_ns - since) + " ago";
  }
  if (!r.site.empty()) out += ", at '" + r.site + '\'';
  return out + ')';
}

// "#5 all_reduce(count=4, dtype=float32, op=sum) (started 10.2 s ago, at 'step 3')"; a
// point-to-point operation without the number (it has none).
std::string describe(const OpRecord& r, const RankView& rank) {
  if (!r.collective) return r.call() + describe_state(r, rank);
  std::string out = "#";  // piecewise: "#" + std::to_string() trips g++ 12's bogus -Wrestrict
  out += std::to_string(r.seq);
  out += ' ';
  return out + r.call() + describe_state(r, rank);
}

std::string group_name(const OpRecord& r, const RingSnapshot& ring) {
  return r.group >= 0 ? ring.groups[static_cast<std::size_t>(r.group)].name : "";
}

std::string rank_list(const std::vector<const Member*>& members) {
  std::string out = members.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(members[i]->rank->rank);
  }
  return out;
}

std::string status_of(const RankView& r) {
  return r.status.empty() ? "" : " (rank " + std::to_string(r.rank) + " " + r.status + ")";
}

// The first sequence number at which two members' calls differ.
std::optional<std::string> diverged(const GroupView& g) {
  std::map<std::uint64_t, std::vector<std::pair<const Member*, const OpRecord*>>> by_seq;
  for (const Member& m : g.members) {
    for (const OpRecord* r : m.ops) by_seq[r->seq].emplace_back(&m, r);
  }
  for (const auto& [seq, calls] : by_seq) {
    const OpRecord& first = *calls[0].second;  // a structured binding clang 14 cannot capture
    const bool agree = std::all_of(calls.begin(), calls.end(),
                                   [&](const auto& c) { return c.second->same_call(first); });
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
std::optional<std::string> behind(const GroupView& g) {
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
                      describe(*m->ops.back(), *m->rank);
    line += status_of(*m->rank) + "; ";
  }
  line += rank_list(waiting) + " reached " + describe(*waiting[0]->ops.back(), *waiting[0]->rank);
  return line;
}

const OpRecord* last_point_to_point(const RankView& rank) {
  const auto& records = rank.ring->records;
  const auto last = std::find_if(records.rbegin(), records.rend(),
                                 [](const OpRecord& r) { return !r.collective; });
  return last == records.rend() ? nullptr : &*last;
}

// The job rank holding rank `group_rank` of the group `r` ran on, if its ring says so.
const RankView* peer_of(const OpRecord& r, const RankView& rank,
                        const std::vector<RankView>& ranks) {
  if (r.group < 0 || r.peer < 0) return nullptr;
  const std::uint32_t id = rank.ring->groups[static_cast<std::size_t>(r.group)].id;
  for (const RankView& other : ranks) {
    if (!other.ring) continue;
    for (const GroupInfo& g : other.ring->groups) {
      if (g.id == id && g.rank == r.peer && !g.name.empty()) return &other;
    }
  }
  return nullptr;
}

// "rank 0 waits in recv(peer=1) ..." and what its peer was doing: waiting on it in turn (a
// deadlock), or in no point-to-point operation at all (stuck elsewhere).
std::optional<std::string> peer_verdict(const RankView& rank, const OpRecord& op,
                                        const std::vector<RankView>& ranks) {
  const RankView* peer = peer_of(op, rank, ranks);
  if (peer == nullptr || peer == &rank) return std::nullopt;
  const std::string me = "rank " + std::to_string(rank.rank);
  const std::string them = "rank " + std::to_string(peer->rank);
  const OpRecord* theirs = last_point_to_point(*peer);
  if (theirs != nullptr && theirs->state != OpState::kCompleted &&
      peer_of(*theirs, *peer, ranks) == &rank) {
    if (theirs->op == op.op && op.op == "recv") {
      return "ranks " + std::to_string(std::min(rank.rank, peer->rank)) + " and " +
             std::to_string(std::max(rank.rank, peer->rank)) +
             " each wait to receive from the other: a deadlock";
    }
    return std::nullopt;  // a matching pair in flight
  }
  std::string line = me + " waits on " + them + " in " + op.call() + ", and " + them +
                     " is in no point-to-point operation with it";
  const auto& records = peer->ring->records;
  const auto last = std::find_if(records.rbegin(), records.rend(),
                                 [&](const OpRecord& r) { return r.state == OpState::kCompleted; });
  if (last != records.rend()) {
    line += ": its last completed operation is " + last->call() + describe_state(*last, *peer) +
            ", " + seconds(peer->read_ns - last->ended_ns) + " before its ring was read";
  }
  return line + status_of(*peer);
}

// Each rank's last point-to-point operation when it did not complete, then what its peer did.
std::vector<std::string> point_to_point(const std::vector<RankView>& ranks) {
  std::string pending;
  std::vector<std::string> verdicts;
  for (const RankView& rank : ranks) {
    if (!rank.ring) continue;
    const OpRecord* last = last_point_to_point(rank);
    if (last == nullptr || last->state == OpState::kCompleted) continue;
    const std::string group = group_name(*last, *rank.ring);
    pending += (pending.empty() ? "" : "; ");
    pending += "rank " + std::to_string(rank.rank) + " in " + last->call() +
               (group.empty() ? "" : " on group '" + group + "'") + describe_state(*last, rank);
    const auto verdict = peer_verdict(rank, *last, ranks);
    if (verdict && std::find(verdicts.begin(), verdicts.end(), *verdict) == verdicts.end()) {
      verdicts.push_back(*verdict);
    }
  }
  if (pending.empty()) return {};
  verdicts.insert(verdicts.begin(), "point-to-point operations that did not complete: " + pending);
  return verdicts;
}

// For ranks that left no ring: what the others were in when theirs were read.
std::vector<std::string> missing_rings(const std::vector<RankView>& ranks) {
  std::vector<std::string> lines;
  for (const RankView& rank : ranks) {
    if (rank.ring) continue;
    lines.push_back("rank " + std::to_string(rank.rank) + " has no record (" + rank.missing + ")");
  }
  if (lines.empty()) return lines;
  for (const RankView& rank : ranks) {
    if (!rank.ring) continue;
    const auto& records = rank.ring->records;
    const auto last = std::find_if(records.rbegin(), records.rend(), [](const OpRecord& r) {
      return r.state != OpState::kCompleted;
    });
    if (last == records.rend()) continue;
    const std::string group = group_name(*last, *rank.ring);
    lines.push_back("rank " + std::to_string(rank.rank) + " was in " + describe(*last, rank) +
                    (group.empty() ? "" : " on group '" + group + "'") + status_of(rank));
  }
  return lines;
}

// Nothing found: either some operation did not complete although every rank made the same
// calls, or every operation completed and the stop came from outside communication (nothing
// to say when no rank recorded an operation).
std::optional<std::string> nothing_found(const std::vector<RankView>& ranks) {
  bool any = false;
  for (const RankView& rank : ranks) {
    for (const OpRecord& r : rank.ring->records) {
      if (r.state != OpState::kCompleted) {
        return "every rank made the same collective calls on every group, and each reached the "
               "same last one: the stop was not in a collective";
      }
      any = true;
    }
  }
  if (!any) return std::nullopt;
  return "every operation every rank issued completed: the stop was outside communication";
}

// "rank 1 was stopped ... in send(peer=0) on group 'pp' (issued 8.0 s ago, at '...')".
std::vector<std::string> stopped(const std::vector<RankView>& ranks) {
  std::vector<std::string> lines;
  for (const RankView& rank : ranks) {
    if (!rank.stopped) continue;
    std::string line = "rank " + std::to_string(rank.rank) +
                       " was stopped (SIGSTOP, or a debugger) when the job ended, the others "
                       "waiting on it";
    const auto* records = rank.ring ? &rank.ring->records : nullptr;
    if (records != nullptr && !records->empty()) {
      const auto last = std::find_if(records->rbegin(), records->rend(),
                                     [](const OpRecord& r) { return unfinished(r); });
      const OpRecord& r = last != records->rend() ? *last : records->back();
      const std::string group = group_name(r, *rank.ring);
      line += last != records->rend() ? "; it was in " : "; its last operation was ";
      line += describe(r, rank) + (group.empty() ? "" : " on group '" + group + "'");
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace

std::vector<std::string> diagnose(const std::vector<RankView>& ranks) {
  std::vector<std::string> lines;
  if (std::none_of(ranks.begin(), ranks.end(),
                   [](const RankView& r) { return r.ring.has_value(); }))
    return lines;  // not a job of weft programs: nothing to say
  lines = stopped(ranks);
  const auto groups = groups_of(ranks);
  for (const auto& [id, g] : groups) {
    if (auto line = diverged(g)) lines.push_back(*line);
  }
  for (const auto& [id, g] : groups) {
    if (auto line = behind(g)) lines.push_back(*line);
  }
  for (std::string& line : point_to_point(ranks)) lines.push_back(std::move(line));
  const std::vector<std::string> missing = missing_rings(ranks);
  if (lines.empty() && missing.empty()) {
    if (auto line = nothing_found(ranks)) lines.push_back(*line);
  }
  lines.insert(lines.end(), missing.begin(), missing.end());
  for (std::string& line : lines) line = "flight recorder: " + line;
  return lines;
}

std::optional<std::string> straggler(const std::vector<RankView>& ranks) {
  for (const auto& [id, g] : groups_of(ranks)) {
    if (g.members.size() < 2 || static_cast<int>(g.members.size()) != g.size) continue;
    // Per sequence number every member completed: when each member issued it.
    std::map<std::uint64_t, std::vector<std::int64_t>> issued;
    for (std::size_t m = 0; m < g.members.size(); ++m) {
      for (const OpRecord* r : g.members[m].ops) {
        if (r->state != OpState::kCompleted) continue;
        auto& at = issued[r->seq];
        at.resize(g.members.size(), -1);
        at[m] = r->issued_ns;
      }
    }
    std::vector<int> last(g.members.size(), 0);
    std::vector<std::int64_t> late_ns(g.members.size(), 0);
    std::int64_t waited_ns = 0, first_ns = -1, end_ns = 0;
    int collectives = 0;
    for (const auto& [seq, at] : issued) {
      if (std::count(at.begin(), at.end(), -1) > 0) continue;
      ++collectives;
      const auto latest = std::max_element(at.begin(), at.end());
      std::vector<std::int64_t> others(at);
      others.erase(others.begin() + (latest - at.begin()));
      const std::int64_t next = *std::max_element(others.begin(), others.end());
      for (const std::int64_t t : others) waited_ns += *latest - t;
      if (*latest > next) {
        ++last[static_cast<std::size_t>(latest - at.begin())];
        late_ns[static_cast<std::size_t>(latest - at.begin())] += *latest - next;
      }
      first_ns = first_ns < 0 ? *std::min_element(at.begin(), at.end()) : first_ns;
      end_ns = *latest;
    }
    const auto worst =
        static_cast<std::size_t>(std::max_element(last.begin(), last.end()) - last.begin());
    const std::int64_t span_ns = end_ns - first_ns;
    const std::int64_t others_ns = waited_ns / static_cast<std::int64_t>(g.members.size() - 1);
    if (collectives < 8 || 4 * last[worst] < 3 * collectives || 10 * others_ns < span_ns) {
      continue;
    }
    char text[160];
    std::snprintf(text, sizeof text,
                  "': it arrived last at %d of %d collectives, %.0f ms after the next on average; "
                  "the others spent %s of those collectives' %s waiting",
                  last[worst], collectives, static_cast<double>(late_ns[worst]) / last[worst] / 1e6,
                  seconds(others_ns).c_str(), seconds(span_ns).c_str());
    return "flight recorder: rank " + std::to_string(g.members[worst].rank->rank) +
           " is a straggler on group '" + g.name + text;
  }
  return std::nullopt;
}

}  // namespace weft::recorder
