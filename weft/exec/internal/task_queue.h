// TaskQueue: one worker's queue in ThreadPoolExecutor. Any thread may push (submitters) and
// pop (the owner, and idle workers stealing). Not public.
//
// The fast path is a bounded lock-free ring (Dmitry Vyukov's MPMC queue: each cell carries a
// sequence number that says whether it is free for the producer of round k or full for the
// consumer of round k, so producers and consumers only contend on one CAS each). When the
// ring is full, tasks spill into a mutex-protected deque, and keep going there until it is
// drained, so the order stays first in, first out.
// The ring replaced a mutex + deque; alone it gained little (2.5-2.8 M to 2.8 M tasks/s), the
// gains came from the cache-line and polling changes it allowed (docs/PERFORMANCE_LOG.md,
// "Session 1").
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "weft/exec/internal/future_state.h"

namespace weft::internal {

using TaskPtr = std::shared_ptr<Runnable>;

class TaskQueue {
 public:
  static constexpr std::size_t kRingSize = 1024;  // a power of two

  TaskQueue() : cells_(new Cell[kRingSize]) {
    for (std::size_t i = 0; i < kRingSize; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }

  void push(TaskPtr task) {
    // While tasks wait in the overflow, new ones queue behind them there: pop drains the
    // ring first, so ring pushes would overtake (and could starve) the overflowed tasks.
    if (overflow_size_.load() == 0 && try_push_ring(task)) return;
    std::lock_guard lock(overflow_mu_);
    overflow_.push_back(std::move(task));
    overflow_size_.fetch_add(1);
  }

  TaskPtr pop() {
    if (TaskPtr task = try_pop_ring()) return task;
    if (overflow_size_.load(std::memory_order_relaxed) == 0) return nullptr;
    std::lock_guard lock(overflow_mu_);
    if (overflow_.empty()) return nullptr;
    TaskPtr task = std::move(overflow_.front());
    overflow_.pop_front();
    overflow_size_.fetch_sub(1, std::memory_order_relaxed);
    return task;
  }

  // True if a task may be queued. It reads the cell at the head rather than the tail index,
  // so that polling workers leave the submitter's tail line alone. seq_cst loads: the
  // sleep/wake handshake relies on them.
  bool maybe_nonempty() const {
    const std::size_t head = head_.load();
    return cells_[head & (kRingSize - 1)].seq.load() == head + 1 || overflow_size_.load() != 0;
  }

 private:
  struct Cell {
    std::atomic<std::size_t> seq;
    TaskPtr task;
  };

  bool try_push_ring(TaskPtr& task) {
    std::size_t pos = tail_.load(std::memory_order_relaxed);
    Cell* cell;
    for (;;) {
      cell = &cells_[pos & (kRingSize - 1)];
      const std::size_t seq = cell->seq.load(std::memory_order_acquire);
      const auto diff = static_cast<std::intptr_t>(seq) - static_cast<std::intptr_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (diff < 0) {
        return false;  // full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
    cell->task = std::move(task);
    // seq_cst: the publication must be ordered before the submitter's later look at the
    // sleeper count, pairing with a sleeping worker's registration (see ThreadPoolImpl).
    cell->seq.store(pos + 1);
    return true;
  }

  TaskPtr try_pop_ring() {
    std::size_t pos = head_.load(std::memory_order_relaxed);
    Cell* cell;
    for (;;) {
      cell = &cells_[pos & (kRingSize - 1)];
      const std::size_t seq = cell->seq.load(std::memory_order_acquire);
      const auto diff = static_cast<std::intptr_t>(seq) - static_cast<std::intptr_t>(pos + 1);
      if (diff == 0) {
        // seq_cst, so that maybe_nonempty's seq_cst load of head_ is never stale.
        if (head_.compare_exchange_weak(pos, pos + 1)) break;
      } else if (diff < 0) {
        return nullptr;  // empty, or the producer of this cell has not published it yet
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
    TaskPtr task = std::move(cell->task);
    cell->seq.store(pos + kRingSize, std::memory_order_release);
    return task;
  }

  std::unique_ptr<Cell[]> cells_;
  alignas(64) std::atomic<std::size_t> tail_{0};
  alignas(64) std::atomic<std::size_t> head_{0};
  alignas(64) std::atomic<std::size_t> overflow_size_{0};
  std::mutex overflow_mu_;
  std::deque<TaskPtr> overflow_;
};

}  // namespace weft::internal
