#include "weft/launch/internal/flight_rings.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>

#include "weft/recorder/dump.h"
#include "weft/recorder/ring.h"

namespace weft::launch::internal {

FlightRings::FlightRings(int workers) {
  const char* off = std::getenv("WEFT_FLIGHT_RECORDER");
  if (off != nullptr && std::string_view(off) == "0") return;
  for (int i = 0; i < workers; ++i) {
    UniqueFd fd(::memfd_create("weft-flight-recorder", MFD_CLOEXEC));
    void* map = MAP_FAILED;
    if (fd && ::ftruncate(fd.get(), static_cast<off_t>(recorder::kRingBytes)) == 0) {
      map = ::mmap(nullptr, recorder::kRingBytes, PROT_READ, MAP_SHARED, fd.get(), 0);
    }
    if (map == MAP_FAILED) {  // unrecorded rather than not run
      for (void* m : maps_) ::munmap(m, recorder::kRingBytes);
      maps_.clear();
      fds_.clear();
      return;
    }
    fds_.push_back(std::move(fd));
    maps_.push_back(map);
  }
}

FlightRings::~FlightRings() {
  for (void* m : maps_) ::munmap(m, recorder::kRingBytes);
}

int FlightRings::fd(int local) const {
  return fds_.empty() ? -1 : fds_[static_cast<std::size_t>(local)].get();
}

std::vector<recorder::RankView> FlightRings::views(const std::vector<int>& ranks) const {
  std::vector<recorder::RankView> views;
  for (std::size_t i = 0; i < maps_.size(); ++i) {
    recorder::RankView view{.rank = ranks[i], .read_ns = recorder::coarse_clock_ns()};
    try {
      view.ring = recorder::read_ring(maps_[i], recorder::kRingBytes);
    } catch (const recorder::RingError&) {
      // the worker never wrote a ring (not a weft program), or wrote over it
    }
    views.push_back(std::move(view));
  }
  return views;
}

std::vector<std::string> FlightRings::diagnose(const std::vector<int>& ranks,
                                               const std::vector<std::string>& endings,
                                               const std::vector<bool>& stopped) const {
  if (maps_.empty()) return {};
  std::vector<recorder::RankView> views = this->views(ranks);
  for (std::size_t i = 0; i < views.size() && i < endings.size(); ++i) {
    views[i].status = endings[i];
    views[i].stopped = stopped[i];
  }
  std::vector<std::string> lines = recorder::diagnose(views);
  if (auto line = recorder::straggler(views)) lines.push_back(std::move(*line));
  const char* prefix = std::getenv("WEFT_FLIGHT_RECORDER_DUMP");
  if (prefix == nullptr || *prefix == '\0') return lines;
  for (const recorder::RankView& view : views) {
    if (!view.ring) continue;
    const std::string path = prefix + std::to_string(view.rank) + ".json";
    try {
      recorder::write_dump(path, recorder::dump_of(*view.ring, view.status));
      lines.push_back("flight recorder: wrote " + path + " (read it with weft-fr)");
    } catch (const Error& e) {
      lines.push_back(std::string("flight recorder: ") + e.what());
    }
  }
  return lines;
}

std::optional<std::string> FlightRings::straggler(const std::vector<int>& ranks) const {
  if (maps_.empty()) return std::nullopt;
  return recorder::straggler(views(ranks));
}

}  // namespace weft::launch::internal
