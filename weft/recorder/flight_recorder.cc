#include "weft/recorder/flight_recorder.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "weft/recorder/dump.h"
#include "weft/recorder/ring_reader.h"

namespace weft::recorder {
namespace {

constexpr std::size_t kSiteBytes = sizeof(Record::site);
// The thread's label, NUL-padded to the end: a record copies it whole, a word at a time.
alignas(8) thread_local char t_site[kSiteBytes] = {};

// `from`'s first N - 1 bytes at most, NUL-padded.
template <std::size_t N>
void copy_text(char (&to)[N], std::string_view from) {
  const std::size_t n = std::min(from.size(), N - 1);
  std::memcpy(to, from.data(), n);
  std::memset(to + n, 0, N - n);
}

// `from`'s first Bytes - 1 bytes at most, NUL-padded, word by word. The words are put
// together in registers: a word memcpy'd in pieces and read back whole stalls store
// forwarding, which cost more than the rest of the record.
template <std::size_t Bytes>
void store_text(Text<Bytes>& to, std::string_view from) {
  const std::size_t n = std::min(from.size(), Bytes - 1);
  for (std::size_t w = 0; w < Bytes / 8; ++w) {
    std::uint64_t word = 0;
    for (std::size_t b = 8 * w; b < std::min(n, 8 * w + 8); ++b) {
      // Byte b - 8w of the word in memory, as the reader copies it out (ring_reader.cc).
      const std::size_t at =
          std::endian::native == std::endian::little ? b - 8 * w : 7 - (b - 8 * w);
      word |= std::uint64_t{static_cast<unsigned char>(from[b])} << (8 * at);
    }
    to.words[w].store(word, std::memory_order_release);
  }
}

void store_site(Text<kSiteBytes>& to) {
  for (std::size_t w = 0; w < kSiteBytes / 8; ++w) {
    std::uint64_t word;
    std::memcpy(&word, t_site + 8 * w, 8);
    to.words[w].store(word, std::memory_order_release);
  }
}

// The ring weftrun passes (WEFT_FLIGHT_RECORDER_FD: a memfd of kRingBytes it created and
// zero-filled), mapped shared; nullptr when it is not what weftrun makes: never written to a
// stranger's file. (A worker's own child inherits the variable but not the descriptor.)
void* weftrun_ring(const char* fd_text) {
  char* end = nullptr;
  const long fd = std::strtol(fd_text, &end, 10);
  struct stat st {};
  if (end == fd_text || *end != '\0' || fd < 3 || ::fstat(static_cast<int>(fd), &st) != 0 ||
      !S_ISREG(st.st_mode) || st.st_size != static_cast<off_t>(kRingBytes)) {
    return nullptr;
  }
  void* memory =
      ::mmap(nullptr, kRingBytes, PROT_READ | PROT_WRITE, MAP_SHARED, static_cast<int>(fd), 0);
  ::close(static_cast<int>(fd));  // the mapping keeps the memory; no child inherits the fd
  return memory == MAP_FAILED ? nullptr : memory;
}

// This process's own ring, when no weftrun shares one: private memory, which only a dump
// (WEFT_FLIGHT_RECORDER_DUMP) shows to anyone else.
void* private_ring() {
  void* memory =
      ::mmap(nullptr, kRingBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return memory == MAP_FAILED ? nullptr : memory;
}

}  // namespace

FlightRecorder& FlightRecorder::process() {
  // Never destroyed: operations may be recorded from threads that outlive static destructors.
  static FlightRecorder* recorder = [] {
    const char* off = std::getenv("WEFT_FLIGHT_RECORDER");
    if (off != nullptr && std::string_view(off) == "0") return new FlightRecorder(nullptr);
    if (const char* fd = std::getenv("WEFT_FLIGHT_RECORDER_FD")) {
      if (void* shared = weftrun_ring(fd)) return new FlightRecorder(shared);
    }
    const char* prefix = std::getenv("WEFT_FLIGHT_RECORDER_DUMP");
    return new FlightRecorder(private_ring(), prefix != nullptr ? prefix : "");
  }();
  return *recorder;
}

FlightRecorder::FlightRecorder(void* memory, std::string dump_prefix)
    : ring_(static_cast<RingHeader*>(memory)),
      records_(memory == nullptr
                   ? nullptr
                   : reinterpret_cast<Record*>(static_cast<char*>(memory) + sizeof(RingHeader))),
      dump_prefix_(std::move(dump_prefix)) {
  if (ring_ == nullptr) return;
  ring_->magic = kRingMagic;
  ring_->version = kRingVersion;
  ring_->records = kRingRecords;
  ring_->rank.store(-1, std::memory_order_relaxed);
  ring_->pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_release);
}

void FlightRecorder::set_rank(int rank, int world_size) {
  if (ring_ == nullptr) return;
  ring_->world_size.store(world_size, std::memory_order_relaxed);
  // A second, different world in this process (ranks as threads): the ring is no one rank's.
  int was = -1;
  if (!ring_->rank.compare_exchange_strong(was, rank, std::memory_order_acq_rel) && was != rank) {
    ring_->rank.store(kSeveralRanks, std::memory_order_release);
  }
}

std::uint32_t FlightRecorder::add_group(std::uint32_t id, std::string_view name,
                                        std::span<const int> members, int rank) {
  if (ring_ == nullptr) return kMaxGroups;
  const std::uint32_t index = ring_->groups.fetch_add(1, std::memory_order_relaxed);
  if (index >= kMaxGroups) return kMaxGroups;
  GroupSlot& slot = ring_->group[index];
  slot.id = id;
  slot.size = static_cast<std::int32_t>(members.size());
  slot.rank = rank;
  // Mesh groups are evenly spaced (dp: r, r + tp, ...): two numbers say who the members are.
  const int stride = members.size() > 1 ? members[1] - members[0] : 1;
  bool spaced = stride > 0;
  for (std::size_t i = 1; spaced && i < members.size(); ++i) {
    spaced = members[i] - members[i - 1] == stride;
  }
  slot.first = members.empty() ? 0 : members[0];
  slot.stride = spaced && !members.empty() ? stride : 0;
  copy_text(slot.name, name);
  slot.ready.store(1, std::memory_order_release);
  return index;
}

Record* FlightRecorder::record_of(std::uint64_t id) const { return &records_[id % kRingRecords]; }

std::uint64_t FlightRecorder::issued(const OpInfo& info) {
  if (ring_ == nullptr) return kWriting;
  const std::uint64_t id = ring_->next.fetch_add(1, std::memory_order_relaxed);
  Record& r = *record_of(id);
  r.stamp.store(kWriting, std::memory_order_relaxed);
  // Release stores: a reader that sees any of them sees kWriting too (ring.h).
  constexpr auto release = std::memory_order_release;
  r.seq.store(info.seq, release);
  r.count.store(info.count, release);
  r.group.store(info.group, release);
  r.root.store(info.root, release);
  r.peer.store(info.peer, release);
  r.dtype.store(static_cast<std::uint8_t>(info.dtype), release);
  r.collective.store(info.collective ? 1 : 0, release);
  const std::int64_t now = coarse_clock_ns();
  r.state.store(static_cast<std::uint8_t>(info.started ? OpState::kStarted : OpState::kIssued),
                release);
  r.issued_ns.store(now, release);
  r.started_ns.store(info.started ? now : 0, release);
  r.ended_ns.store(0, release);
  store_text(r.op, info.op);
  store_text(r.reduce, info.reduce);
  store_site(r.site);
  r.stamp.store(stamp_of(id), std::memory_order_release);
  return id;
}

// An operation still running when kRingRecords newer ones were issued has lost its record:
// the stamp check leaves the newer one alone.
void FlightRecorder::started(std::uint64_t id) {
  if (id == kWriting) return;
  Record& r = *record_of(id);
  if (r.stamp.load(std::memory_order_relaxed) != stamp_of(id)) return;
  r.started_ns.store(coarse_clock_ns(), std::memory_order_relaxed);
  r.state.store(static_cast<std::uint8_t>(OpState::kStarted), std::memory_order_release);
}

void FlightRecorder::finished(std::uint64_t id, bool ok) {
  if (id == kWriting) return;
  Record& r = *record_of(id);
  if (r.stamp.load(std::memory_order_relaxed) != stamp_of(id)) return;
  r.ended_ns.store(coarse_clock_ns(), std::memory_order_relaxed);
  r.state.store(static_cast<std::uint8_t>(ok ? OpState::kCompleted : OpState::kFailed),
                std::memory_order_release);
  if (!ok && !dump_prefix_.empty() && !dumped_.exchange(true)) dump_after_failure();
}

// The first failure is the one to explain: later ones are its consequences. Said on stderr,
// like the error the failure itself raises.
void FlightRecorder::dump_after_failure() const {
  const int rank = ring_->rank.load(std::memory_order_acquire);
  if (rank < 0) return;  // no world, or several: no file name that means one rank
  const std::string path = dump_prefix_ + std::to_string(rank) + ".json";
  try {
    write_dump(path, dump_of(read_ring(ring_, kRingBytes), "failed in an operation"));
    std::fprintf(stderr, "weft: flight recorder: wrote %s (read it with weft-fr)\n", path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft: flight recorder: %s\n", e.what());
  }
}

FlightRecorder::Site::Site(std::string_view label) {
  std::memcpy(saved_, t_site, sizeof(saved_));
  if (t_site[0] == '\0') {
    copy_text(t_site, label);
    return;
  }
  std::string nested = saved_;
  nested += " / ";
  nested += label;
  copy_text(t_site, nested);
}

FlightRecorder::Site::~Site() { std::memcpy(t_site, saved_, sizeof(saved_)); }

}  // namespace weft::recorder
