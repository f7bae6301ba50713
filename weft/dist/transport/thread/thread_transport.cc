#include "weft/dist/transport/thread/thread_transport.h"

#include <algorithm>
#include <cstring>

namespace weft::dist {

ThreadHub::ThreadHub(int world_size) {
  for (int i = 0; i < world_size; ++i) boxes_.push_back(std::make_unique<Mailbox>());
}

void ThreadHub::send(int from, int to, Tag tag, std::span<const std::byte> bytes) {
  Mailbox& box = *boxes_.at(static_cast<std::size_t>(to));
  {
    std::lock_guard lock(box.mu);
    check_aborted();
    box.messages[{from, tag}].emplace_back(bytes.begin(), bytes.end());
  }
  box.cv.notify_all();
}

void ThreadHub::take(std::deque<std::vector<std::byte>>& queue, int from,
                     std::span<std::byte> out) {
  std::vector<std::byte>& message = queue.front();
  if (message.size() != out.size()) {
    throw PeerError("rank " + std::to_string(from) + " sent " + std::to_string(message.size()) +
                    " bytes where " + std::to_string(out.size()) +
                    " were expected: the ranks called different operations or sizes (run "
                    "with WEFT_DIST_DEBUG=detail to see each rank's call)");
  }
  if (!out.empty()) std::memcpy(out.data(), message.data(), out.size());
  queue.pop_front();
}

void ThreadHub::recv(int to, int from, Tag tag, std::span<std::byte> out, Deadline deadline) {
  Mailbox& box = *boxes_.at(static_cast<std::size_t>(to));
  std::unique_lock lock(box.mu);
  const auto key = std::make_pair(from, tag);
  const auto ready = [&] {
    if (aborted_.load()) return true;
    const auto it = box.messages.find(key);
    return it != box.messages.end() && !it->second.empty();
  };
  if (!box.cv.wait_until(lock, deadline.when(), ready)) {
    throw PeerTimeout(from, "no message from rank " + std::to_string(from) + " in time");
  }
  check_aborted();
  auto it = box.messages.find(key);
  take(it->second, from, out);
  if (it->second.empty()) box.messages.erase(it);
}

int ThreadHub::recv_any(int to, Tag tag, std::span<std::byte> out, Deadline deadline) {
  Mailbox& box = *boxes_.at(static_cast<std::size_t>(to));
  std::unique_lock lock(box.mu);
  auto found = box.messages.end();
  const auto ready = [&] {
    if (aborted_.load()) return true;
    for (auto it = box.messages.begin(); it != box.messages.end(); ++it) {
      if (it->first.second == tag && !it->second.empty()) {
        found = it;
        return true;
      }
    }
    return false;
  };
  if (!box.cv.wait_until(lock, deadline.when(), ready)) {
    throw PeerTimeout(-1, "no message from any rank in time");
  }
  check_aborted();
  const int from = found->first.first;
  take(found->second, from, out);
  if (found->second.empty()) box.messages.erase(found);
  return from;
}

void ThreadHub::abort(const std::string& reason) {
  {
    std::lock_guard lock(abort_mu_);
    if (!abort_reason_.empty()) return;
    abort_reason_ = reason;
  }
  aborted_.store(true);
  for (auto& box : boxes_) {
    { std::lock_guard lock(box->mu); }  // a waiter between its check and its wait sees it
    box->cv.notify_all();
  }
}

void ThreadHub::note_arrival(Tag op, int rank, int group_size) {
  std::lock_guard lock(arrivals_mu_);
  std::vector<int>& in = arrivals_[op];
  in.push_back(rank);
  // Everyone arrived: nothing left to report for this collective.
  if (static_cast<int>(in.size()) == group_size) arrivals_.erase(op);
}

std::vector<int> ThreadHub::not_arrived(Tag op, const std::vector<int>& ranks) {
  std::lock_guard lock(arrivals_mu_);
  const auto it = arrivals_.find(op);
  std::vector<int> missing;
  for (int r : ranks) {
    if (it == arrivals_.end() || std::find(it->second.begin(), it->second.end(), r) == it->second.end()) {
      missing.push_back(r);
    }
  }
  return missing;
}

void ThreadHub::check_aborted() const {
  if (!aborted_.load()) return;
  std::lock_guard lock(abort_mu_);
  throw PeerError(abort_reason_);
}

}  // namespace weft::dist
