#include "weft/exec/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

#include "weft/base/spin.h"
#include "weft/base/system.h"
#include "weft/exec/internal/task_queue.h"

namespace weft {
namespace internal {
namespace {

std::atomic<int> g_executor_counter{0};

// How long an idle worker polls for work before it sleeps on a condition variable. Waking a
// sleeper costs the submitter a futex system call (microseconds); polling for a while keeps
// a steady stream of small tasks off that path. Tuned with bench_executor
// (docs/PERFORMANCE.md).
constexpr int kIdleSpinRounds = 256;

// The pool whose worker this thread is, if any.
thread_local const void* t_current_pool = nullptr;

}  // namespace

class ThreadPoolImpl {
 public:
  ThreadPoolImpl(std::size_t max_workers, ExecutorOptions options)
      : max_workers_(max_workers == 0 ? std::min<std::size_t>(32, available_cores() + 4)
                                      : max_workers),
        options_(std::move(options)) {
    if (options_.thread_name_prefix.empty()) {
      options_.thread_name_prefix = "weft-pool" + std::to_string(g_executor_counter++);
    }
    queues_.resize(max_workers_);    // each made when its worker starts
    threads_.reserve(max_workers_);  // so that starting a worker never reallocates
  }

  void enqueue(TaskPtr task);
  [[noreturn]] void reject_submit();

  // Ends a submit's count in submits_in_flight_ on every path out of enqueue, exceptions
  // included (a count left behind would keep the workers from ever exiting).
  class InFlight {
   public:
    explicit InFlight(ThreadPoolImpl& pool) : pool_(pool) {}
    ~InFlight();
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    ThreadPoolImpl& pool_;
  };
  void shutdown(bool wait, bool cancel_futures);
  std::size_t max_workers() const { return max_workers_; }
  std::size_t num_threads() const { return started_.load(std::memory_order_acquire); }

 private:
  void worker_main(std::size_t self);
  bool run_initializer();
  TaskPtr find_task(std::size_t self);
  bool has_work() const;
  bool should_exit() const;
  bool take_idle_token();
  // Starts a worker with `task` in its queue; false (task untouched) if at max_workers.
  bool start_worker_with(TaskPtr& task);
  void wake_one();
  void wake_all();
  void fail_queued(const std::exception_ptr& reason);
  void mark_broken(const std::string& reason);
  std::exception_ptr broken_error() const;
  // Spins briefly, then sleeps until there may be work (true) or the pool is done (false).
  bool wait_for_work();

  const std::size_t max_workers_;
  ExecutorOptions options_;
  // One slot per possible worker; slot i is filled before started_ exceeds i (release), so
  // readers that saw started_ (acquire) see the queue.
  std::vector<std::unique_ptr<TaskQueue>> queues_;

  // The atomics are grouped by who writes them, one cache line per group: a submit's
  // read-modify-writes must not evict the lines that spinning workers keep reading.
  alignas(64) std::atomic<std::size_t> started_{0};  // workers started = live queues
  std::atomic<bool> shutdown_{false};
  std::atomic<bool> broken_{false};
  alignas(64) std::atomic<std::size_t> submits_in_flight_{0};
  alignas(64) std::atomic<std::size_t> idle_tokens_{0};  // idle workers no submit claimed

  mutable std::mutex start_mu_;  // guards threads_, broken_reason_, shutdown transitions
  std::vector<std::thread> threads_;
  std::string broken_reason_;
  std::mutex join_mu_;

  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;
  alignas(64) std::atomic<int> sleepers_{0};
};

void ThreadPoolImpl::enqueue(TaskPtr task) {
  // Counting the submit before checking the flags lets workers tell "no more work will
  // come" (shutdown and no submit in flight) from "a submit is about to push".
  submits_in_flight_.fetch_add(1);
  InFlight in_flight(*this);
  if (shutdown_.load() || broken_.load()) reject_submit();
  // Idle tokens only decide whether to start a worker, so a full pool skips them.
  const bool full = num_threads() == max_workers_;
  if (full || take_idle_token() || !start_worker_with(task)) {
    const std::size_t n = num_threads();
    if (n == 0) reject_submit();  // shut down before the first worker could start
    // Round robin per submitting thread: a shared counter would be one more contended line.
    thread_local std::size_t next_queue = 0;
    queues_[next_queue++ % n]->push(std::move(task));
  }
}

ThreadPoolImpl::InFlight::~InFlight() {
  pool_.submits_in_flight_.fetch_sub(1);
  // During shutdown every sleeper may be waiting for this submit to land before it exits:
  // wake them all, not one.
  if (pool_.shutdown_.load()) {
    pool_.wake_all();
  } else if (pool_.sleepers_.load() > 0) {
    pool_.wake_one();
  }
  // An initializer may have failed while we pushed; make sure nothing is left stranded.
  if (pool_.broken_.load()) pool_.fail_queued(pool_.broken_error());
}

void ThreadPoolImpl::reject_submit() {
  if (broken_.load()) std::rethrow_exception(broken_error());
  throw ExecutorShutdown(
      "submit() after shutdown(): this executor accepts no more work; create a new one");
}

bool ThreadPoolImpl::take_idle_token() {
  std::size_t tokens = idle_tokens_.load(std::memory_order_relaxed);
  while (tokens > 0) {
    if (idle_tokens_.compare_exchange_weak(tokens, tokens - 1)) return true;
  }
  return false;
}

bool ThreadPoolImpl::start_worker_with(TaskPtr& task) {
  if (started_.load(std::memory_order_acquire) >= max_workers_) return false;
  std::unique_lock lock(start_mu_);
  const std::size_t index = started_.load();
  if (index >= max_workers_ || shutdown_.load()) return false;
  // The task goes into the new worker's queue before the worker exists, so that its first
  // look finds it instead of offering itself as idle to the next submit; and the queue is
  // counted live before the worker runs, so that whoever the worker's idle token reaches
  // sees at least one queue.
  queues_[index] = std::make_unique<TaskQueue>();
  queues_[index]->push(std::move(task));
  started_.store(index + 1, std::memory_order_release);
  try {
    threads_.emplace_back(&ThreadPoolImpl::worker_main, this, index);
  } catch (const std::system_error& e) {
    // With other workers alive they steal from this queue; with none, nothing can run.
    if (index == 0) {
      lock.unlock();
      mark_broken(std::string("no worker thread could be started: ") + e.what());
    }
  }
  return true;
}

TaskPtr ThreadPoolImpl::find_task(std::size_t self) {
  if (TaskPtr task = queues_[self]->pop()) return task;
  const std::size_t n = num_threads();
  for (std::size_t k = 1; k < n; ++k) {
    TaskQueue& victim = *queues_[(self + k) % n];
    if (!victim.maybe_nonempty()) continue;
    if (TaskPtr task = victim.pop()) return task;
  }
  return nullptr;
}

bool ThreadPoolImpl::has_work() const {
  const std::size_t n = num_threads();
  for (std::size_t i = 0; i < n; ++i) {
    if (queues_[i]->maybe_nonempty()) return true;
  }
  return false;
}

bool ThreadPoolImpl::should_exit() const {
  return shutdown_.load() && submits_in_flight_.load() == 0 && !has_work();
}

void ThreadPoolImpl::wake_one() {
  { std::lock_guard lock(sleep_mu_); }  // a sleeper between its check and its wait sees us
  sleep_cv_.notify_one();
}

void ThreadPoolImpl::wake_all() {
  { std::lock_guard lock(sleep_mu_); }
  sleep_cv_.notify_all();
}

bool ThreadPoolImpl::wait_for_work() {
  for (int i = 0; i < kIdleSpinRounds; ++i) {
    if (has_work()) return true;
    if (should_exit()) return false;
    spin_pause(i);
  }
  if (options_.idle_spin.count() > 0) {
    const auto until = std::chrono::steady_clock::now() + options_.idle_spin;
    for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
      if (has_work()) return true;
      if (should_exit()) return false;
      spin_pause(i);
    }
  }
  std::unique_lock lock(sleep_mu_);
  // Dekker-style handshake: we publish that we sleep, then look for work; a submitter
  // publishes work, then looks for sleepers. With seq_cst on both sides one sees the other.
  sleepers_.fetch_add(1);
  while (!has_work() && !should_exit()) sleep_cv_.wait(lock);
  sleepers_.fetch_sub(1);
  return has_work() || !should_exit();
}

void ThreadPoolImpl::worker_main(std::size_t self) {
  t_current_pool = this;
  const std::string name = options_.thread_name_prefix + "_" + std::to_string(self);
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  if (!run_initializer()) return;
  bool idle = false;
  for (;;) {
    if (TaskPtr task = find_task(self)) {
      if (idle) {
        if (num_threads() < max_workers_) take_idle_token();  // busy again: withdraw the offer
        idle = false;
      }
      task->run();
      continue;
    }
    if (!idle) {
      if (num_threads() < max_workers_) idle_tokens_.fetch_add(1);
      idle = true;
    }
    if (!wait_for_work()) return;
  }
}

bool ThreadPoolImpl::run_initializer() {
  if (!options_.initializer) return true;
  try {
    options_.initializer();
    return true;
  } catch (const std::exception& e) {
    mark_broken(std::string("a worker thread's initializer failed: ") + e.what());
  } catch (...) {
    mark_broken("a worker thread's initializer failed with a non-standard exception");
  }
  return false;
}

void ThreadPoolImpl::mark_broken(const std::string& reason) {
  {
    std::lock_guard lock(start_mu_);
    if (broken_reason_.empty()) broken_reason_ = reason;
  }
  broken_.store(true);
  fail_queued(broken_error());
  wake_all();
}

std::exception_ptr ThreadPoolImpl::broken_error() const {
  std::lock_guard lock(start_mu_);
  return std::make_exception_ptr(
      BrokenExecutor(broken_reason_ +
                     "; this ThreadPoolExecutor can no longer run tasks: fix the cause and "
                     "create a new executor"));
}

void ThreadPoolImpl::fail_queued(const std::exception_ptr& reason) {
  for (std::size_t i = 0; i < num_threads(); ++i) {
    while (TaskPtr task = queues_[i]->pop()) task->abandon(reason);
  }
}

void ThreadPoolImpl::shutdown(bool wait, bool cancel_futures) {
  shutdown_.store(true);
  if (cancel_futures) {
    for (std::size_t i = 0; i < num_threads(); ++i) {
      while (TaskPtr task = queues_[i]->pop()) task->cancel();
    }
  }
  wake_all();
  // A task of this pool cannot wait for the pool to finish (it is part of what would be
  // waited for); it returns at once and the destructor, which runs elsewhere, joins.
  if (!wait || t_current_pool == this) return;
  std::lock_guard join_lock(join_mu_);  // only threads outside the pool take it
  std::vector<std::thread*> to_join;
  {
    std::lock_guard lock(start_mu_);
    for (auto& t : threads_) to_join.push_back(&t);
  }
  for (std::thread* t : to_join) {
    if (t->joinable()) t->join();
  }
}

}  // namespace internal

ThreadPoolExecutor::ThreadPoolExecutor(std::size_t max_workers, ExecutorOptions options)
    : impl_(std::make_unique<internal::ThreadPoolImpl>(max_workers, std::move(options))) {}

ThreadPoolExecutor::~ThreadPoolExecutor() { shutdown(/*wait=*/true); }

void ThreadPoolExecutor::shutdown(bool wait, bool cancel_futures) {
  impl_->shutdown(wait, cancel_futures);
}

std::size_t ThreadPoolExecutor::max_workers() const { return impl_->max_workers(); }
std::size_t ThreadPoolExecutor::num_threads() const { return impl_->num_threads(); }

void ThreadPoolExecutor::enqueue(std::shared_ptr<internal::Runnable> task) {
  impl_->enqueue(std::move(task));
}

}  // namespace weft
