// OpQueue: the thread that runs one process group's operations, strictly in issue order
// (collectives must run in the same order on every rank). Not public.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace weft::dist::internal {

class OpQueue {
 public:
  OpQueue();
  // Runs every queued operation, then joins the thread.
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  void push(std::function<void()> op);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> ops_;  // guarded by mu_
  bool stopping_ = false;                  // guarded by mu_
  std::thread thread_;
};

}  // namespace weft::dist::internal
