// test::run_forked_ranks: ranks as forked processes, for the multi-process backends. The
// parent hosts the job's TCPStore (port 0) and forks `n` children with RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, WEFT_JOB_TOKEN and WEFT_STORE_HOSTED set, as weftrun would; each
// runs `fn(rank)` and exits with its result. The parent waits for all of them until the
// deadline, then kills whoever is left, so a hung rank fails the test instead of hanging it.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "weft/store/tcp_store.h"

namespace weft::test {

struct RankExit {
  bool exited = false;  // false: killed by a signal (or by us at the deadline)
  int code = -1;        // exit code, or the signal number
};

// The store of the last run, kept so that a test can read what the ranks published.
inline std::unique_ptr<store::TCPStore>& last_job_store() {
  static std::unique_ptr<store::TCPStore> store;
  return store;
}

inline std::string last_job_value(const std::string& key) {
  last_job_store()->set_timeout(Seconds(5));
  return last_job_store()->get(key);
}

inline std::vector<RankExit> run_forked_ranks(
    int n, const std::function<int(int)>& fn,
    std::chrono::seconds limit = std::chrono::seconds(60)) {
  store::TCPStoreOptions options;
  options.is_server = true;
  options.token = "test-job-token";
  last_job_store().reset();
  last_job_store() = std::make_unique<store::TCPStore>(options);
  store::TCPStore& server = *last_job_store();
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(server.port()).c_str(), 1);
      ::setenv("WEFT_JOB_TOKEN", "test-job-token", 1);
      ::setenv("WEFT_STORE_HOSTED", "1", 1);
      int code = 1;
      try {
        code = fn(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: uncaught %s\n", r, e.what());
      }
      std::fflush(nullptr);
      ::_exit(code);  // not exit(): the parent's objects (the store server) are not ours
    }
    pids.push_back(pid);
  }
  std::vector<RankExit> exits(static_cast<std::size_t>(n));
  const auto give_up = std::chrono::steady_clock::now() + limit;
  for (int r = 0; r < n; ++r) {
    int status = 0;
    while (::waitpid(pids[static_cast<std::size_t>(r)], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > give_up)
        ::kill(pids[static_cast<std::size_t>(r)], SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    exits[static_cast<std::size_t>(r)] =
        WIFEXITED(status) ? RankExit{true, WEXITSTATUS(status)} : RankExit{false, WTERMSIG(status)};
  }
  return exits;
}

}  // namespace weft::test
