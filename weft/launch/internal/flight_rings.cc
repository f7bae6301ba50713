#include "weft/launch/internal/flight_rings.h"

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>

#include "weft/recorder/diagnosis.h"
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

std::vector<std::string> FlightRings::diagnose(const std::vector<int>& ranks, int failed,
                                               const std::string& failed_status) const {
  if (maps_.empty()) return {};
  std::vector<recorder::RankView> views;
  for (std::size_t i = 0; i < maps_.size(); ++i) {
    recorder::RankView view{.rank = ranks[i]};
    try {
      view.ring = recorder::read_ring(maps_[i], recorder::kRingBytes);
    } catch (const recorder::RingError&) {
      // the worker never wrote a ring (not a weft program), or wrote over it
    }
    if (ranks[i] == failed) view.status = failed_status;
    views.push_back(std::move(view));
  }
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return recorder::diagnose(views,
                            static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec);
}

}  // namespace weft::launch::internal
