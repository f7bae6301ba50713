// A worker for weftrun's tests: what it does is chosen by its first argument.
//   env               prints the launcher's variables, one NAME=value a line, and whether
//                     something listens on MASTER_PORT and WEFT_STORE_PORT (NAME_taken=1)
//   args A...         prints each argument as arg=A
//   spam N            prints N numbered lines to stdout and N/4 to stderr, each written in
//                     two pieces, so that a launcher that tears lines shows it
//   partial           prints a last line without '\n'
//   long N            prints one line of N 'a's
//   fail R CODE       rank R exits with CODE after 300 ms; the others print pid= and sleep
//   signal R SIG      rank R kills itself with SIG; the others print pid= and sleep
//   flaky             exits 3 in the first attempt (WEFT_RESTART_COUNT=0), then 0
//   crash-once R [MS] prints whether it replaces a dead worker and WEFT_RECOVER; rank R
//                     kills itself with SIGKILL unless it does; the others exit 0 after MS
//                     milliseconds (1000 unless given);
//                     a replacement prints the deaths the job's store records (deaths=N
//                     ranks=R,...)
//   sleep             prints "ready pid=P" and sleeps
//   ignore-term       ignores SIGTERM, prints "ready pid=P" and sleeps
//   fds               prints the descriptors it has besides 0, 1 and 2 (fds= none), the
//                     flight recorder's ring as "ring"
//   cpus              prints how many CPUs it may run on (cpus=N) and the first (cpu=C)
// Arguments after those are ignored: tests add a unique tag to find the processes later.
#include <dirent.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "weft/store/death_log.h"
#include "weft/store/prefix_store.h"
#include "weft/store/tcp_store.h"

namespace {

constexpr unsigned kSleepSeconds = 60;  // far longer than any test waits

// weftrun's variable `name`; exits 98 without it.
std::string variable(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) {
    std::fprintf(stderr, "launch_test_worker: %s is not set\n", name);
    std::_Exit(98);
  }
  return v;
}

// The deaths the job's store records for this attempt, as "deaths=N ranks=R,R,...".
void print_deaths() {
  auto job = std::make_shared<weft::store::TCPStore>(
      weft::store::TCPStoreOptions{.host = variable("MASTER_ADDR"),
                                   .port = std::stoi(variable("WEFT_STORE_PORT")),
                                   .token = variable("WEFT_JOB_TOKEN"),
                                   .timeout = weft::Seconds(10)});
  weft::store::PrefixStore attempt(
      weft::store::attempt_prefix(std::stoi(variable("WEFT_RESTART_COUNT"))), job);
  const int world = std::stoi(variable("WORLD_SIZE"));
  weft::store::DeathLog deaths;
  deaths.refresh(attempt, world);
  std::string ranks;
  for (int r = 0; r < world; ++r)
    if (deaths.died_after(r, 0)) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  std::printf("deaths=%lld ranks=%s\n", static_cast<long long>(deaths.counted()), ranks.c_str());
}

int rank() {
  const char* r = std::getenv("RANK");
  return r != nullptr ? std::atoi(r) : -1;
}

void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) std::_Exit(99);
    done += static_cast<std::size_t>(n);
  }
}

// Whether something listens on loopback's `port`. SO_REUSEADDR: the workers probe at once,
// and a socket that is bound but not listening must not make the port look taken.
bool port_taken(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool taken =
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return taken;
}

int print_env() {
  for (const char* name :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "WEFT_BACKEND", "WEFT_JOB_TOKEN",
        "WEFT_RESTART_COUNT", "WEFT_STORE_HOSTED", "WEFT_STORE_PORT"}) {
    const char* value = std::getenv(name);
    std::printf("%s=%s\n", name, value != nullptr ? value : "<unset>");
  }
  for (const char* name : {"MASTER_PORT", "WEFT_STORE_PORT"}) {
    const char* port = std::getenv(name);
    std::printf("%s_taken=%d\n", name, port != nullptr && port_taken(std::atoi(port)) ? 1 : 0);
  }
  return 0;
}

int spam(int lines) {
  const std::string filler(100, 'x');
  for (int i = 0; i < lines; ++i) {
    const std::string line =
        "rank=" + std::to_string(rank()) + " line=" + std::to_string(i) + " " + filler + "\n";
    const int fd = i % 4 == 3 ? 2 : 1;
    write_all(fd, line.substr(0, line.size() / 2));
    write_all(fd, line.substr(line.size() / 2));
  }
  return 0;
}

[[noreturn]] void sleep_forever() {
  std::printf("ready pid=%d\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
  ::sleep(kSleepSeconds);
  std::_Exit(0);
}

int list_fds() {
  std::string fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 98;
  while (const dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] == '.' || fd <= 2 || fd == ::dirfd(dir)) continue;
    char target[256] = {};
    const std::string link = "/proc/self/fd/" + std::string(e->d_name);
    [[maybe_unused]] const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
    const char* ring = std::getenv("WEFT_FLIGHT_RECORDER_FD");
    if (ring != nullptr && std::atoi(ring) == fd &&
        std::string(target).starts_with("/memfd:weft-flight-recorder")) {
      fds += " ring";  // the flight recorder's, which weftrun hands every worker
      continue;
    }
    fds += ' ';
    fds += e->d_name;
    fds += "->";
    fds += target;
  }
  ::closedir(dir);
  std::printf("fds=%s\n", fds.empty() ? " none" : fds.c_str());
  return 0;
}

int print_cpus() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c) {
    if (CPU_ISSET(c, &set)) first = c;
  }
  std::printf("cpus=%d\ncpu=%d\n", CPU_COUNT(&set), first);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const auto arg = [&](int i) { return i < argc ? std::atoi(argv[i]) : 0; };
  if (mode == "env") return print_env();
  if (mode == "args") {
    for (int i = 2; i < argc; ++i) std::printf("arg=%s\n", argv[i]);
    return 0;
  }
  if (mode == "spam") return spam(arg(2));
  if (mode == "partial") {
    std::printf("no newline at the end");
    return 0;
  }
  if (mode == "long") {
    std::printf("%s\n", std::string(static_cast<std::size_t>(arg(2)), 'a').c_str());
    return 0;
  }
  if (mode == "fail" || mode == "signal") {
    if (rank() != arg(2)) sleep_forever();
    ::usleep(300 * 1000);  // time for the others to start: they must be stopped
    if (mode == "signal") ::kill(::getpid(), arg(3));
    return arg(3);
  }
  if (mode == "flaky") {
    const char* count = std::getenv("WEFT_RESTART_COUNT");
    std::printf("attempt %s\n", count != nullptr ? count : "?");
    return count != nullptr && std::string(count) == "0" ? 3 : 0;
  }
  if (mode == "crash-once") {  // rank arg(2) dies by SIGKILL unless it is a replacement
    const char* replacement = std::getenv("WEFT_REPLACEMENT");
    const bool replaced = replacement != nullptr && std::string(replacement) == "1";
    const char* recover = std::getenv("WEFT_RECOVER");
    std::printf("started replacement=%d recover=%s attempt=%s\n", replaced ? 1 : 0,
                recover != nullptr ? recover : "-", std::getenv("WEFT_RESTART_COUNT"));
    std::fflush(stdout);
    if (rank() == arg(2) && !replaced) {
      ::usleep(200 * 1000);
      ::kill(::getpid(), SIGKILL);
    }
    if (replaced) print_deaths();
    const int lives_ms = argc > 3 ? arg(3) : 1000;
    ::usleep(replaced ? 0 : static_cast<useconds_t>(lives_ms) * 1000);  // outliving the death
    return 0;
  }
  if (mode == "sleep") sleep_forever();
  if (mode == "ignore-term") {
    ::signal(SIGTERM, SIG_IGN);
    sleep_forever();
  }
  if (mode == "fds") return list_fds();
  if (mode == "cpus") return print_cpus();
  std::fprintf(stderr, "launch_test_worker: unknown mode '%s'\n", mode.c_str());
  return 64;
}
