#include "weft/base/system.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <thread>

namespace weft {

std::size_t available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<std::size_t>(n);
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? hw : 1;
}

namespace {

// The number after `key` in a "key: N kB" line of /proc/meminfo, in bytes; -1 if absent.
std::int64_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  std::int64_t kib = 0;
  std::string unit;
  while (in >> name >> kib >> unit) {
    if (name == key + ":") return kib * 1024;
  }
  return -1;
}

// A cgroup v2 file of this process's group read as a number; -1 if absent or "max".
std::int64_t cgroup_number(const std::string& file) {
  std::ifstream self("/proc/self/cgroup");
  std::string line;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    std::ifstream in("/sys/fs/cgroup" + line.substr(3) + "/" + file);
    std::string text;
    if (!(in >> text) || text == "max") return -1;
    try {
      return std::stoll(text);
    } catch (const std::exception&) {
      return -1;
    }
  }
  return -1;
}

}  // namespace

std::int64_t available_memory_bytes() {
  std::int64_t available = meminfo_bytes("MemAvailable");
  const std::int64_t limit = cgroup_number("memory.max"), used = cgroup_number("memory.current");
  if (limit >= 0 && used >= 0) {
    const std::int64_t left = std::max<std::int64_t>(0, limit - used);
    available = available < 0 ? left : std::min(available, left);
  }
  return available;
}

}  // namespace weft
