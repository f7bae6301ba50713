#include "weft/base/system.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
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

std::int64_t resident_memory_bytes() {
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[128] = {};
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  const char* resident = n > 0 ? std::strchr(text, ' ') : nullptr;  // the second field, pages
  if (resident == nullptr) return 0;
  return std::strtoll(resident + 1, nullptr, 10) * static_cast<std::int64_t>(::getpagesize());
}

std::int64_t peak_resident_memory_bytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos && colon + 1 < line.size()) {
      const auto start = line.find_first_not_of(" \t", colon + 1);
      if (start != std::string::npos) {
        return line.substr(start, line.find_last_not_of(" \t\r") - start + 1);
      }
    }
  }
  return "unknown";
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

// The path of a cgroup v2 file of this process's group; "" when it has none.
std::string cgroup_file(const std::string& file) {
  std::ifstream self("/proc/self/cgroup");
  std::string line;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3) + "/" + file;
  }
  return "";
}

// A cgroup file read as a number; -1 if absent or "max".
std::int64_t cgroup_number(const std::string& file) {
  std::ifstream in(cgroup_file(file));
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    return -1;
  }
}

// The page cache the kernel can reclaim from the cgroup (memory.stat's inactive_file, as the
// kubelet counts it), which memory.current includes.
std::int64_t cgroup_reclaimable() {
  std::ifstream in(cgroup_file("memory.stat"));
  std::string key;
  std::int64_t value = 0;
  while (in >> key >> value) {
    if (key == "inactive_file") return value;
  }
  return 0;
}

}  // namespace

std::int64_t available_memory_bytes() {
  std::int64_t available = meminfo_bytes("MemAvailable");
  const std::int64_t limit = cgroup_number("memory.max"), used = cgroup_number("memory.current");
  if (limit >= 0 && used >= 0) {
    const std::int64_t left = std::max<std::int64_t>(0, limit - used + cgroup_reclaimable());
    available = available < 0 ? left : std::min(available, left);
  }
  return available;
}

}  // namespace weft
