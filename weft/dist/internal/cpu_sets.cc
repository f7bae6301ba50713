#include "weft/dist/internal/cpu_sets.h"

#include <sched.h>

#include <charconv>
#include <string_view>

namespace weft::dist::internal {

std::string allowed_cpus() {
  cpu_set_t cpus;
  if (::sched_getaffinity(0, sizeof(cpus), &cpus) != 0) return {};
  std::string list;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &cpus)) continue;
    if (!list.empty()) list += ',';
    list += std::to_string(cpu);
  }
  return list;
}

std::size_t cpus_together(const std::vector<std::string>& lists) {
  cpu_set_t all;
  CPU_ZERO(&all);
  for (const std::string& list : lists) {
    if (list.empty()) return 0;
    std::string_view rest = list;
    while (!rest.empty()) {
      const std::size_t comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      int cpu = -1;
      const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), cpu);
      if (error == std::errc() && end == item.data() + item.size() && cpu >= 0 &&
          cpu < CPU_SETSIZE) {
        CPU_SET(cpu, &all);
      }
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  return static_cast<std::size_t>(CPU_COUNT(&all));
}

std::size_t cpus_together(store::Store& store, const std::string& prefix, std::int64_t ranks) {
  std::vector<std::string> lists;
  for (std::int64_t i = 0; i < ranks; ++i) lists.push_back(store.get(prefix + std::to_string(i)));
  return cpus_together(lists);
}

}  // namespace weft::dist::internal
