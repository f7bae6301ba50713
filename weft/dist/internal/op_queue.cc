#include "weft/dist/internal/op_queue.h"

namespace weft::dist::internal {

OpQueue::OpQueue() : thread_([this] { loop(); }) {}

OpQueue::~OpQueue() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void OpQueue::push(std::function<void()> op) {
  {
    std::lock_guard lock(mu_);
    ops_.push_back(std::move(op));
  }
  cv_.notify_one();
}

void OpQueue::loop() {
  for (;;) {
    std::function<void()> op;
    {
      std::unique_lock lock(mu_);
      // Untimed: the queue's own thread waits for work; every operation carries a deadline.
      cv_.wait(lock, [this] { return stopping_ || !ops_.empty(); });
      if (ops_.empty()) return;
      op = std::move(ops_.front());
      ops_.pop_front();
    }
    op();  // operations report their own errors through their Work
  }
}

}  // namespace weft::dist::internal
