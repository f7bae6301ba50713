#include "weft/recorder/ring_reader.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

namespace weft::recorder {
namespace {

// A NUL-terminated text of at most N - 1 bytes, whatever the array holds.
template <std::size_t N>
std::string text_of(const char (&chars)[N]) {
  return std::string(chars, ::strnlen(chars, N));
}

template <std::size_t Bytes>
std::string text_of(const Text<Bytes>& text) {
  char chars[Bytes];
  for (std::size_t w = 0; w < Bytes / 8; ++w) {
    const std::uint64_t word = text.words[w].load(std::memory_order_acquire);
    std::memcpy(chars + 8 * w, &word, 8);
  }
  chars[Bytes - 1] = '\0';
  return text_of(chars);
}

constexpr int kMaxMembers = 1 << 20;  // more ranks than any job has: a scribbled slot

// The members' job ranks when the slot says they are evenly spaced (and they fit an int).
std::vector<int> spaced_members(const GroupSlot& slot) {
  const std::int64_t last =
      static_cast<std::int64_t>(slot.first) + std::int64_t{slot.stride} * (slot.size - 1);
  if (slot.stride <= 0 || slot.first < 0 || slot.size > kMaxMembers ||
      last > std::numeric_limits<int>::max()) {
    return {};
  }
  std::vector<int> members(static_cast<std::size_t>(slot.size));
  for (int i = 0; i < slot.size; ++i)
    members[static_cast<std::size_t>(i)] = slot.first + slot.stride * i;
  return members;
}

std::vector<GroupInfo> read_groups(const RingHeader& h) {
  std::vector<GroupInfo> groups;
  const std::uint32_t claimed = std::min(h.groups.load(std::memory_order_acquire), kMaxGroups);
  for (std::uint32_t i = 0; i < claimed; ++i) {
    const GroupSlot& slot = h.group[i];
    GroupInfo g;
    if (slot.ready.load(std::memory_order_acquire) == 1 && slot.size > 0 && slot.rank >= 0 &&
        slot.rank < slot.size) {
      g = GroupInfo{slot.id, text_of(slot.name), slot.size, slot.rank, {}};
      g.members = spaced_members(slot);
    }
    groups.push_back(std::move(g));  // every index kept, so that records can point at it
  }
  return groups;
}

// Record `id` as it is now, or false when it is being written or holds another id.
bool read_record(const Record& r, std::uint64_t id, const std::vector<GroupInfo>& groups,
                 OpRecord& out) {
  if (r.stamp.load(std::memory_order_acquire) != stamp_of(id)) return false;
  constexpr auto acquire = std::memory_order_acquire;
  out.id = id;
  out.seq = r.seq.load(acquire);
  out.count = r.count.load(acquire);
  const std::uint32_t group = r.group.load(acquire);
  out.group = group < groups.size() && !groups[group].name.empty() ? static_cast<int>(group) : -1;
  out.root = r.root.load(acquire);
  out.peer = r.peer.load(acquire);
  out.collective = r.collective.load(acquire) != 0;
  const std::uint8_t dtype = r.dtype.load(acquire);
  out.dtype =
      dtype <= static_cast<std::uint8_t>(DType::kInt64) ? static_cast<DType>(dtype) : DType::kUInt8;
  const std::uint8_t state = r.state.load(acquire);
  out.state = state >= 1 && state <= 4 ? static_cast<OpState>(state) : OpState::kIssued;
  out.issued_ns = r.issued_ns.load(acquire);
  out.started_ns = r.started_ns.load(acquire);
  out.ended_ns = r.ended_ns.load(acquire);
  out.op = text_of(r.op);
  out.reduce = text_of(r.reduce);
  out.site = text_of(r.site);
  return r.stamp.load(std::memory_order_relaxed) == stamp_of(id);  // not rewritten while copied
}

}  // namespace

std::string OpRecord::call() const {
  if (!collective) return op + (peer >= 0 ? "(peer=" + std::to_string(peer) + ")" : "(any peer)");
  std::string out = op + "(";
  if (count != kAnyCount) out += "count=" + std::to_string(count) + ", ";
  out += "dtype=" + std::string(dtype_name(dtype));
  if (root >= 0) out += ", root=" + std::to_string(root);
  if (peer >= 0) out += ", peer=" + std::to_string(peer);
  if (!reduce.empty()) out += ", op=" + reduce;
  return out + ")";
}

bool OpRecord::same_call(const OpRecord& other) const {
  const bool counts_agree = count == other.count || count == kAnyCount || other.count == kAnyCount;
  return op == other.op && counts_agree && dtype == other.dtype && root == other.root &&
         reduce == other.reduce;
}

RingSnapshot read_ring(const void* memory, std::size_t bytes) {
  const auto& h = *static_cast<const RingHeader*>(memory);
  if (bytes != kRingBytes || h.magic != kRingMagic || h.version != kRingVersion ||
      h.records != kRingRecords) {
    throw RingError("flight recorder: not a version " + std::to_string(kRingVersion) + " ring of " +
                    std::to_string(kRingBytes) + " bytes");
  }
  RingSnapshot s;
  s.rank = h.rank.load(std::memory_order_acquire);
  s.world_size = h.world_size.load(std::memory_order_relaxed);
  s.pid = h.pid.load(std::memory_order_relaxed);
  s.groups = read_groups(h);
  const auto* records =
      reinterpret_cast<const Record*>(static_cast<const char*>(memory) + sizeof(RingHeader));
  const std::uint64_t next = h.next.load(std::memory_order_acquire);
  const std::uint64_t first = next > kRingRecords ? next - kRingRecords : 0;
  for (std::uint64_t id = first; id < next; ++id) {
    OpRecord r;
    if (read_record(records[id % kRingRecords], id, s.groups, r)) s.records.push_back(r);
  }
  return s;
}

const char* state_name(OpState state) {
  switch (state) {
    case OpState::kIssued:
      return "issued";
    case OpState::kStarted:
      return "started";
    case OpState::kCompleted:
      return "completed";
    case OpState::kFailed:
      return "failed";
  }
  return "unknown";
}

}  // namespace weft::recorder
