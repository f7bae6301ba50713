// test::Gate: a one-shot latch that tasks wait on until the test opens it. Waits are bounded
// (30 s) so a broken test fails instead of hanging.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace weft::test {

class Gate {
 public:
  void open() {
    // Notifying under the lock: a waiter cannot return, and destroy the gate, before the
    // notification is complete.
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(30), [this] { return open_; })) {
      std::fprintf(stderr, "test::Gate: not opened within 30 s\n");
      std::abort();
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace weft::test
