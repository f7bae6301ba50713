// The limits collectives on one host meet, measured in the same run as them
// (compare.sh prints them above its tables):
//  - one thread's copy bandwidth (memcpy of 1, 16 and 64 MiB, bytes copied per second, the
//    best of 20): moving a message from one process to another is at least one such copy, so
//    a large all-reduce's or broadcast's bus bandwidth is bounded by it;
//  - the kernel's copy (process_vm_readv of 1 and 16 MiB out of this process's own memory,
//    the best of 20): what a single copy out of a peer's buffer runs at, the kernel copying
//    page by page;
//  - the round trip of a cache line between two threads on the first two CPUs this process
//    may use (median of 5 runs of 200,000 exchanges): the least a 2-rank collective that
//    waits for its peer can take. Hypervisors move vCPUs between cores that share a cache and
//    cores that do not, so it changes between runs, and small collectives with it;
//  - a system call's cost (getppid, median of 5 runs of 100,000): what every futex wake, yield,
//    kernel copy and socket call pays besides its work. Some hypervisors make it 10-20 times a
//    bare machine's (1.0-1.2 us on a 2-vCPU Zen 5 VM, docs/PERFORMANCE.md).
// Built by compare.sh with g++; not part of weft's build.
//
//   machine_limits            prints "limit copy_gbps <MiB> <GB/s>", "limit kernel_copy_gbps
//                             <MiB> <GB/s>", "limit round_trip_ns <ns>" and
//                             "limit syscall_ns <ns>"
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// The best of 20 runs of copy(to, from, bytes), in GB/s; 0 if a copy fails.
template <class Copy>
double best_gbps(std::size_t bytes, const Copy& copy) {
  std::vector<char> from(bytes, 1), to(bytes, 0);
  double best = 0;
  for (int i = 0; i < 20; ++i) {
    const auto start = Clock::now();
    if (!copy(to.data(), from.data(), bytes)) return 0;
    const std::chrono::duration<double> took = Clock::now() - start;
    best = std::max(best, static_cast<double>(bytes) / took.count() / 1e9);
    from[i] = to[bytes - 1 - i];  // keeps the copies from being optimised away
  }
  return best;
}

bool user_copy(char* to, const char* from, std::size_t bytes) {
  std::memcpy(to, from, bytes);
  return true;
}

bool kernel_copy(char* to, const char* from, std::size_t bytes) {
  iovec local{to, bytes}, remote{const_cast<char*>(from), bytes};
  return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(bytes);
}

bool pin(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
}

// -1 when a thread could not be placed on its CPU (a container may forbid it).
double round_trip_ns(int cpu_a, int cpu_b) {
  constexpr int kExchanges = 200000;
  alignas(64) std::atomic<int> ping{0};
  alignas(64) std::atomic<int> pong{0};
  std::atomic<bool> placed{true};
  std::thread peer([&] {
    if (!pin(cpu_b)) placed = false;
    for (int i = 1; i <= kExchanges; ++i) {
      while (ping.load(std::memory_order_acquire) != i) {
      }
      pong.store(i, std::memory_order_release);
    }
  });
  if (!pin(cpu_a)) placed = false;
  const auto start = Clock::now();
  for (int i = 1; i <= kExchanges; ++i) {
    ping.store(i, std::memory_order_release);
    while (pong.load(std::memory_order_acquire) != i) {
    }
  }
  const std::chrono::duration<double, std::nano> took = Clock::now() - start;
  peer.join();
  return placed ? took.count() / kExchanges : -1;
}

double syscall_ns() {
  constexpr int kCalls = 100000;
  std::vector<double> runs;
  for (int run = 0; run < 5; ++run) {
    const auto start = Clock::now();
    for (int i = 0; i < kCalls; ++i) ::syscall(SYS_getppid);  // never cached by libc
    const std::chrono::duration<double, std::nano> took = Clock::now() - start;
    runs.push_back(took.count() / kCalls);
  }
  std::sort(runs.begin(), runs.end());
  return runs[2];
}

}  // namespace

int main() {
  std::printf("limit syscall_ns %.0f\n", syscall_ns());
  for (std::size_t mib : {1, 16, 64}) {
    std::printf("limit copy_gbps %zu %.2f\n", mib, best_gbps(mib << 20, user_copy));
  }
  for (std::size_t mib : {1, 16}) {
    std::printf("limit kernel_copy_gbps %zu %.2f\n", mib, best_gbps(mib << 20, kernel_copy));
  }
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 0;
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  if (cpus.size() < 2) return 0;
  std::vector<double> trips;
  for (int i = 0; i < 5; ++i) trips.push_back(round_trip_ns(cpus[0], cpus[1]));
  if (std::any_of(trips.begin(), trips.end(), [](double t) { return t < 0; })) {
    std::fprintf(stderr, "machine_limits: could not pin threads to CPUs %d and %d: no round trip\n",
                 cpus[0], cpus[1]);
    return 0;
  }
  std::sort(trips.begin(), trips.end());
  std::printf("limit round_trip_ns %.0f\n", trips[2]);
  return 0;
}
