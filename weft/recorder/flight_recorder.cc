#include "weft/recorder/flight_recorder.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace weft::recorder {
namespace {

constexpr std::size_t kSiteBytes = sizeof(Record::site);
thread_local char t_site[kSiteBytes] = {};

// The coarse clock costs a read of the kernel's last tick (a few ns, no TSC read); its
// resolution (a tick, 1-4 ms) is plenty for what waits long enough to matter.
std::int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

template <std::size_t N>
void copy_text(char (&to)[N], std::string_view from) {
  const std::size_t n = std::min(from.size(), N - 1);
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}

// `from`'s first Bytes - 1 bytes at most, NUL-padded, word by word.
template <std::size_t Bytes>
void store_text(Text<Bytes>& to, const char* from, std::size_t n) {
  n = std::min(n, Bytes - 1);
  for (std::size_t w = 0; w < Bytes / 8; ++w) {
    std::uint64_t word = 0;
    if (8 * w < n) std::memcpy(&word, from + 8 * w, std::min<std::size_t>(8, n - 8 * w));
    to.words[w].store(word, std::memory_order_release);
  }
}

// The ring weftrun passes (WEFT_FLIGHT_RECORDER_FD: a memfd of kRingBytes it created and
// zero-filled), mapped shared; nullptr when there is none (weftrun decides whether to record)
// or it is not what weftrun makes (then nothing is recorded rather than anything written to a
// stranger).
void* weftrun_ring() {
  const char* fd_text = std::getenv("WEFT_FLIGHT_RECORDER_FD");
  if (fd_text == nullptr) return nullptr;
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

}  // namespace

FlightRecorder& FlightRecorder::process() {
  static FlightRecorder* recorder = new FlightRecorder(weftrun_ring());  // never destroyed:
  return *recorder;  // operations may be recorded from threads that outlive static destructors
}

FlightRecorder::FlightRecorder(void* memory)
    : ring_(static_cast<RingHeader*>(memory)),
      records_(memory == nullptr
                   ? nullptr
                   : reinterpret_cast<Record*>(static_cast<char*>(memory) + sizeof(RingHeader))) {
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
  ring_->rank.store(rank, std::memory_order_release);
}

std::uint32_t FlightRecorder::add_group(std::uint32_t id, std::string_view name, int size,
                                        int rank) {
  if (ring_ == nullptr) return kMaxGroups;
  const std::uint32_t index = ring_->groups.fetch_add(1, std::memory_order_relaxed);
  if (index >= kMaxGroups) return kMaxGroups;
  GroupSlot& slot = ring_->group[index];
  slot.id = id;
  slot.size = size;
  slot.rank = rank;
  copy_text(slot.name, name);
  slot.ready.store(1, std::memory_order_release);
  return index;
}

Record* FlightRecorder::record_of(std::uint64_t id) const { return &records_[id % kRingRecords]; }

std::uint64_t FlightRecorder::issued(const OpInfo& info) {
  if (ring_ == nullptr) return kWriting;
  const std::uint64_t id = ring_->next.fetch_add(1, std::memory_order_relaxed);
  Record& r = *record_of(id);
  r.id.store(kWriting, std::memory_order_relaxed);
  // Release stores: a reader that sees any of them sees kWriting too (ring.h).
  constexpr auto release = std::memory_order_release;
  r.seq.store(info.seq, release);
  r.count.store(info.count, release);
  r.group.store(info.group, release);
  r.root.store(info.root, release);
  r.peer.store(info.peer, release);
  r.dtype.store(static_cast<std::uint8_t>(info.dtype), release);
  r.collective.store(info.collective ? 1 : 0, release);
  r.state.store(static_cast<std::uint8_t>(OpState::kIssued), release);
  r.issued_ns.store(now_ns(), release);
  r.started_ns.store(0, release);
  r.ended_ns.store(0, release);
  store_text(r.op, info.op.data(), info.op.size());
  store_text(r.reduce, info.reduce.data(), info.reduce.size());
  store_text(r.site, t_site, ::strnlen(t_site, kSiteBytes));
  r.id.store(id, std::memory_order_release);
  return id;
}

// An operation still running when kRingRecords newer ones were issued has lost its record:
// the id check leaves the newer one alone.
void FlightRecorder::started(std::uint64_t id) {
  if (id == kWriting) return;
  Record& r = *record_of(id);
  if (r.id.load(std::memory_order_relaxed) != id) return;
  r.started_ns.store(now_ns(), std::memory_order_relaxed);
  r.state.store(static_cast<std::uint8_t>(OpState::kStarted), std::memory_order_release);
}

void FlightRecorder::finished(std::uint64_t id, bool ok) {
  if (id == kWriting) return;
  Record& r = *record_of(id);
  if (r.id.load(std::memory_order_relaxed) != id) return;
  r.ended_ns.store(now_ns(), std::memory_order_relaxed);
  r.state.store(static_cast<std::uint8_t>(ok ? OpState::kCompleted : OpState::kFailed),
                std::memory_order_release);
}

FlightRecorder::Site::Site(std::string_view label) {
  std::memcpy(saved_, t_site, sizeof(saved_));
  copy_text(t_site, label);
}

FlightRecorder::Site::~Site() { std::memcpy(t_site, saved_, sizeof(saved_)); }

}  // namespace weft::recorder
