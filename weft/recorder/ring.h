// The flight recorder's ring as it lies in memory: a header (whose process, which groups) and
// a ring of fixed-size records, one per operation, written by one process and read by another
// (weftrun) through shared memory, so that the reader sees the ring of a process that is
// running, stopped, deadlocked or dead. Plain data and atomics only; both sides are built from
// this header, and the reader checks every count and index before using it (ring_reader.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "weft/base/deadline.h"

namespace weft::recorder {

inline constexpr std::uint64_t kRingMagic = 0x3152465446455757ull;  // "WWEFTFR1"
inline constexpr std::uint32_t kRingVersion = 3;
inline constexpr std::uint32_t kRingRecords = 4096;  // the last 4096 operations of the process
inline constexpr std::uint32_t kMaxGroups = 64;      // groups named in the table; more count
inline constexpr std::uint64_t kWriting = ~0ull;     // a record's stamp while it is being written
// Record::count of an operation whose count varies by rank (all_to_all_v).
inline constexpr std::uint64_t kAnyCount = ~0ull;
// RingHeader::rank of a process holding several ranks (the threads backend): no one rank's.
inline constexpr std::int32_t kSeveralRanks = -2;

// An operation's state, as its record says.
enum class OpState : std::uint8_t { kIssued = 1, kStarted = 2, kCompleted = 3, kFailed = 4 };

// A process group as this process knows it. Written once, before the group's first record.
struct GroupSlot {
  std::atomic<std::uint32_t> ready;  // 1 once the fields below are written
  std::uint32_t id;                  // the group's id, the same on every member
  std::int32_t size;                 // members
  std::int32_t rank;                 // this process's rank in the group
  std::int32_t first;                // the members' job ranks: first + stride * group rank,
  std::int32_t stride;               // when they are so spaced; stride 0: not known
  char name[40];                     // "world", "dp_shard": NUL-terminated, truncated
};

// Text in a record: NUL-padded bytes held in atomic words, so that a reader copying a record
// while it is rewritten reads stale or new words, never a torn value (flight_recorder.cc).
template <std::size_t Bytes>
struct Text {
  static_assert(Bytes % 8 == 0);
  std::atomic<std::uint64_t> words[Bytes / 8];
};

// One operation. Every field is an atomic (relaxed loads and stores cost what plain ones do
// on x86-64): stamp is set to kWriting first and to stamp_of(the operation's id) last, each
// field written with release and read with acquire, so a reader that reads the same stamp
// before and after copying a record has its issue fields whole (a seqlock without fences).
struct Record {
  std::atomic<std::uint64_t> stamp;      // stamp_of(the operation's number in this process)
  std::atomic<std::uint64_t> seq;        // its sequence number in its group (collectives)
  std::atomic<std::uint64_t> count;      // elements
  std::atomic<std::uint32_t> group;      // index in the group table; kMaxGroups: not in the table
  std::atomic<std::int32_t> root;        // -1: none
  std::atomic<std::int32_t> peer;        // point-to-point: the group rank on the other end; else -1
  std::atomic<std::uint8_t> dtype;       // weft::DType
  std::atomic<std::uint8_t> collective;  // 1: a collective, 0: point-to-point
  std::atomic<std::uint8_t> state;       // OpState
  std::atomic<std::int64_t> issued_ns, started_ns, ended_ns;  // CLOCK_MONOTONIC_COARSE; 0: not yet
  Text<24> op;                                                // "all_reduce"
  Text<16> reduce;  // "sum"; empty when the operation does not reduce
  Text<48> site;    // the issuing thread's label (FlightRecorder::Site)
};

// A record's stamp for operation `id` (0, 1, ...): id + 1, so that a record not yet written
// (the ring's zero-filled pages) is no operation's, operation 0's included.
inline constexpr std::uint64_t stamp_of(std::uint64_t id) { return id + 1; }

struct RingHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t records;                 // kRingRecords
  std::atomic<std::int32_t> rank;        // the process's job rank; -1 until its world forms
  std::atomic<std::int32_t> world_size;  // 0 until then
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint32_t> groups;  // group slots claimed
  std::atomic<std::uint64_t> next;    // operations recorded so far: the next one's id
  GroupSlot group[kMaxGroups];
};

// The clock of the records' times: CLOCK_MONOTONIC_COARSE, the kernel's last tick (a few ns
// to read, no TSC read; a tick's resolution, 1-4 ms, is plenty for what waits long enough to
// matter). One clock for every process of a machine; machines' clocks are unrelated.
inline std::int64_t coarse_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(coarse_now().time_since_epoch())
      .count();
}

// The ring's bytes: the header, then kRingRecords records.
inline constexpr std::size_t kRingBytes = sizeof(RingHeader) + kRingRecords * sizeof(Record);

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::int64_t>::is_always_lock_free);

}  // namespace weft::recorder
