#include "weft/dist/elastic.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <thread>
#include <utility>

#include "weft/base/error.h"
#include "weft/base/parse.h"

namespace weft::dist {
namespace {

// The store is polled: a waiting process asks every few milliseconds (a request or two each).
constexpr auto kPoll = std::chrono::milliseconds(10);
// A ticket's rank is written just after the ticket is drawn: one missing this long after
// belongs to a process that died in between, and is passed over.
constexpr Seconds kTicketWrite{1.0};
// Tickets waiting at once: more means the store holds something else.
constexpr std::int64_t kMostWaiting = 1 << 16;

std::string round_key(int round) { return "elastic/round" + std::to_string(round); }

std::string ticket_key(std::int64_t ticket) { return "elastic/ticket/" + std::to_string(ticket); }

std::string joiner_key(std::int64_t ticket) { return "elastic/joiner/" + std::to_string(ticket); }

// A number in [0, limit) read from the store, or -1.
std::int64_t number_in(const std::string& text, std::int64_t limit) {
  return parse_integer(text, 0, limit - 1).value_or(-1);
}

Error bad_value(const std::string& text, const std::string& key, const std::string& what) {
  return Error("elastic membership: the job's store holds '" + text + "' at " + key + ", not " +
               what + " (another job sharing the store?)");
}

int job_rank_in(const std::string& text, int job_size, const std::string& key) {
  const auto rank = static_cast<int>(number_in(text, job_size));
  if (rank < 0) throw bad_value(text, key, "a rank of this job of " + std::to_string(job_size));
  return rank;
}

// "<kind><deaths seen>:<rank>,<rank>,..." (kind 's': after a failure; 'g': grown by admit).
std::string encode(char kind, std::int64_t deaths_seen, const std::vector<int>& members) {
  std::string text(1, kind);
  text += std::to_string(deaths_seen);
  text += ':';
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (i > 0) text += ',';
    text += std::to_string(members[i]);
  }
  return text;
}

struct Decoded {
  char kind;
  ElasticRound round;
};

Decoded decode(const std::string& text, int round, int job_size, const std::string& key) {
  const std::size_t colon = text.find(':');
  const std::int64_t deaths =
      colon == std::string::npos ? -1 : number_in(text.substr(1, colon - 1), std::int64_t{1} << 62);
  if (text.empty() || (text[0] != 's' && text[0] != 'g') || deaths < 0 ||
      colon + 1 >= text.size()) {
    throw Error("elastic membership: the job's store holds a malformed round at " + key);
  }
  std::vector<int> members;
  for (std::size_t at = colon + 1; at <= text.size();) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    members.push_back(job_rank_in(text.substr(at, comma - at), job_size, key));
    at = comma + 1;
  }
  if (!std::is_sorted(members.begin(), members.end()) ||
      std::adjacent_find(members.begin(), members.end()) != members.end()) {
    throw Error("elastic membership: the round at " + key + " is not a set of this job's ranks");
  }
  return {text[0], ElasticRound{round, std::move(members), deaths}};
}

}  // namespace

int ElasticRound::rank_of(int job_rank) const {
  const auto it = std::find(members.begin(), members.end(), job_rank);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

ElasticMembership::ElasticMembership(std::shared_ptr<store::Store> store, int job_rank,
                                     int job_size, Seconds timeout)
    : store_(std::move(store)), job_rank_(job_rank), job_size_(job_size), timeout_(timeout) {
  if (job_size < 1 || job_rank < 0 || job_rank >= job_size) {
    throw InvalidArgument("ElasticMembership: rank " + std::to_string(job_rank) +
                          " is not in [0, job size " + std::to_string(job_size) + ")");
  }
}

ElasticRound ElasticMembership::first() const {
  ElasticRound round;
  for (int r = 0; r < job_size_; ++r) round.members.push_back(r);
  return round;
}

// The round proposed for `round`'s number, if any; its kind in `kind`.
std::optional<ElasticRound> ElasticMembership::proposed(int round, char* kind) {
  const std::string key = round_key(round);
  if (!store_->check({key})) return std::nullopt;
  Decoded d = decode(store_->get(key), round, job_size_, key);
  if (kind != nullptr) *kind = d.kind;
  return std::move(d.round);
}

// The first proposal for a round's number wins; every proposer reads the winner. A death
// numbered above `deaths_seen` (the count when the members were chosen) is a member's own.
ElasticRound ElasticMembership::propose(int round, char kind, const std::vector<int>& members,
                                        std::int64_t deaths_seen, char* won_kind) {
  const std::string key = round_key(round);
  Decoded d = decode(store_->compare_set(key, "", encode(kind, deaths_seen, members)), round,
                     job_size_, key);
  *won_kind = d.kind;
  return std::move(d.round);
}

// Whether every member of `broken` has arrived at the round keyed `at`, or died since. One
// request while none is recorded dead.
bool ElasticMembership::all_arrived_or_dead(const ElasticRound& broken, const std::string& at) {
  deaths_.refresh(*store_, job_size_);
  if (std::none_of(broken.members.begin(), broken.members.end(),
                   [&](int r) { return deaths_.died_after(r, broken.deaths_seen); })) {
    return false;
  }
  for (const int r : broken.members) {
    if (!deaths_.died_after(r, broken.deaths_seen) &&
        !store_->check({at + "/arrived/" + std::to_string(r)})) {
      return false;
    }
  }
  return true;
}

// Whether every member of `round` is recorded dead (as of the last refresh).
bool ElasticMembership::all_dead(const ElasticRound& round) const {
  return std::all_of(round.members.begin(), round.members.end(),
                     [&](int r) { return deaths_.died_after(r, round.deaths_seen); });
}

// The newest round proposed (first() when none): a request, and two a new round.
const ElasticRound& ElasticMembership::newest_round() {
  if (!newest_) newest_ = first();
  while (auto next = proposed(newest_->round + 1, nullptr)) newest_ = std::move(next);
  return *newest_;
}

ElasticRound ElasticMembership::after_failure(const ElasticRound& broken, Seconds settle) {
  for (int round = broken.round + 1;; ++round) {
    char kind = 0;
    if (auto p = proposed(round, &kind)) {
      if (kind == 'g') continue;  // a growth this process did not take part in
      return *p;                  // closed before this process arrived
    }
    const std::string at = round_key(round);
    store_->set(at + "/arrived/" + std::to_string(job_rank_), "1");
    store_->add(at + "/arrivals", 1);
    const Deadline close = Deadline::after(settle);
    for (;;) {
      if (auto p = proposed(round, &kind)) {
        if (kind == 'g') break;
        return *p;
      }
      const auto arrived = static_cast<std::size_t>(store_->add(at + "/arrivals", 0));
      if (arrived >= broken.members.size() || close.expired() || all_arrived_or_dead(broken, at)) {
        deaths_.refresh(*store_, job_size_);
        std::vector<int> members;
        for (const int r : broken.members) {  // arrived, and not died since (this one lives)
          if ((r == job_rank_ || !deaths_.died_after(r, broken.deaths_seen)) &&
              store_->check({at + "/arrived/" + std::to_string(r)})) {
            members.push_back(r);
          }
        }
        ElasticRound won = propose(round, 's', members, deaths_.counted(), &kind);
        if (kind == 'g') break;
        return won;
      }
      std::this_thread::sleep_for(kPoll);
    }
  }
}

std::optional<ElasticRound> ElasticMembership::next_after_failure(const ElasticRound& broken,
                                                                  Seconds settle) {
  ElasticRound next = after_failure(broken, settle);
  if (next.rank_of(job_rank_) >= 0) return next;
  std::fprintf(stderr, "weft: rank %d came after round %d formed; asking to join it\n", job_rank_,
               next.round);
  return join();
}

std::optional<ElasticRound> ElasticMembership::join() {
  const std::int64_t ticket = store_->add("elastic/joiners", 1);
  store_->set(joiner_key(ticket), std::to_string(job_rank_));
  const Deadline deadline = Deadline::after(timeout_);
  for (;;) {
    const std::string key = ticket_key(ticket);
    if (store_->check({key})) {
      const std::string text = store_->get(key);
      const auto round = static_cast<int>(number_in(text, std::numeric_limits<int>::max()));
      if (round < 1) throw bad_value(text, key, "a round's number");
      if (auto p = proposed(round, nullptr)) return p;
      throw Error("elastic membership: admitted to round " + std::to_string(round) +
                  ", which the job's store does not hold");
    }
    if (store_->check({"elastic/finished"})) return std::nullopt;
    // The deaths first: a round proposed after them has a living proposer among its members.
    deaths_.refresh(*store_, job_size_);
    const ElasticRound& newest = newest_round();
    if (all_dead(newest)) {
      throw Error("elastic membership: every process that held the training state (round " +
                  std::to_string(newest.round) + ") died before rank " + std::to_string(job_rank_) +
                  " was admitted; weftrun restarts every worker from the newest checkpoint while "
                  "restarts remain (keep --checkpoint.resume true)");
    }
    if (deadline.expired()) {
      throw TimeoutError("elastic membership: rank " + std::to_string(job_rank_) +
                         " was not admitted to the job within " + std::to_string(timeout_.count()) +
                         " s (its ranks admit new processes between steps; are they running?)");
    }
    std::this_thread::sleep_for(kPoll);
  }
}

std::optional<ElasticRound> ElasticMembership::admit(const ElasticRound& current) {
  const std::int64_t asked = store_->add("elastic/joiners", 0);
  const std::int64_t admitted = store_->add("elastic/admitted", 0);
  if (asked == admitted) return std::nullopt;
  if (asked < admitted || asked - admitted > kMostWaiting) {
    throw Error("elastic membership: the job's store counts " + std::to_string(asked) +
                " processes asking to join and " + std::to_string(admitted) +
                " admitted (another job sharing the store?)");
  }
  std::vector<int> members = current.members;
  for (std::int64_t t = admitted + 1; t <= asked; ++t) {
    try {
      store_->wait({joiner_key(t)}, kTicketWrite);
    } catch (const TimeoutError&) {
      continue;  // its process died between drawing the ticket and writing its rank
    }
    const int rank = job_rank_in(store_->get(joiner_key(t)), job_size_, joiner_key(t));
    if (std::find(members.begin(), members.end(), rank) == members.end()) members.push_back(rank);
  }
  std::sort(members.begin(), members.end());
  if (members.size() == current.members.size()) {  // only dead tickets
    store_->add("elastic/admitted", asked - admitted);
    return std::nullopt;
  }
  char kind = 0;
  deaths_.refresh(*store_, job_size_);
  const ElasticRound won = propose(current.round + 1, 'g', members, deaths_.counted(), &kind);
  if (kind != 'g' || won.members != members) return std::nullopt;  // a failure came first
  for (std::int64_t t = admitted + 1; t <= asked; ++t) {
    store_->set(ticket_key(t), std::to_string(won.round));
  }
  store_->add("elastic/admitted", asked - admitted);
  return won;
}

void ElasticMembership::finish() { store_->set("elastic/finished", "1"); }

JoinedWorld ElasticMembership::form(const ElasticRound& round, InitOptions options) const {
  options.rank = round.rank_of(job_rank_);
  if (options.rank < 0) {
    throw InvalidArgument("ElasticMembership::form: rank " + std::to_string(job_rank_) +
                          " is not a member of round " + std::to_string(round.round));
  }
  options.world_size = static_cast<int>(round.members.size());
  options.round = round.round;
  return join_process_group(std::move(options));
}

}  // namespace weft::dist
