#include "weft/dist/transport/mailbox.h"

#include <algorithm>
#include <cstring>

namespace weft::dist {

void Mailbox::deliver(int from, Tag tag, std::vector<std::byte> message) {
  {
    std::lock_guard lock(mu_);
    messages_[{from, tag}].push_back(std::move(message));
  }
  cv_.notify_all();
}

void Mailbox::deliver_copy(int from, Tag tag, std::span<const std::byte> bytes) {
  std::vector<std::byte> buffer;
  if (recycles_ && bytes.size() >= kSpareMinBytes) {
    std::lock_guard lock(mu_);
    auto fits = spares_.end();
    for (auto it = spares_.begin(); it != spares_.end(); ++it) {
      if (it->capacity() >= bytes.size() &&
          (fits == spares_.end() || it->capacity() < fits->capacity()))
        fits = it;
    }
    if (fits != spares_.end()) {
      buffer = std::move(*fits);
      spares_.erase(fits);
    }
  }
  buffer.assign(bytes.begin(), bytes.end());  // within its capacity: no allocation, no zeroing
  deliver(from, tag, std::move(buffer));
}

std::size_t Mailbox::spare_bytes() {
  std::lock_guard lock(mu_);
  std::size_t bytes = 0;
  for (const auto& spare : spares_) bytes += spare.capacity();
  return bytes;
}

// Keeps the kSpares largest buffers.
void Mailbox::keep_spare(std::vector<std::byte> buffer) {
  if (!recycles_ || buffer.capacity() < kSpareMinBytes) return;
  if (spares_.size() == kSpares) {
    const auto smallest =
        std::min_element(spares_.begin(), spares_.end(),
                         [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
    if (smallest->capacity() >= buffer.capacity()) return;
    spares_.erase(smallest);
  }
  spares_.push_back(std::move(buffer));
}

void Mailbox::take(Queue& queue, int from, std::span<std::byte> out) {
  std::vector<std::byte>& message = queue.front();
  if (message.size() != out.size()) {
    throw PeerError("rank " + std::to_string(from) + " sent " + std::to_string(message.size()) +
                    " bytes where " + std::to_string(out.size()) +
                    " were expected: the ranks called different operations or sizes (run "
                    "with WEFT_DIST_DEBUG=detail to see each rank's call)");
  }
  if (!out.empty()) std::memcpy(out.data(), message.data(), out.size());
  keep_spare(std::move(message));
  queue.pop_front();
}

void Mailbox::throw_if_failed_locked(int from) const {
  if (!abort_reason_.empty()) throw PeerError(abort_reason_);
  const auto it = failed_peers_.find(from);
  if (it != failed_peers_.end()) throw PeerError(it->second);
}

void Mailbox::recv(int from, Tag tag, std::span<std::byte> out, const Deadline& deadline) {
  std::unique_lock lock(mu_);
  const auto key = std::make_pair(from, tag);
  bool have = false;
  const auto ready = [&] {
    const auto it = messages_.find(key);
    have = it != messages_.end() && !it->second.empty();
    return have || !abort_reason_.empty() || failed_peers_.contains(from);
  };
  if (!cv_.wait_until(lock, deadline.when(), ready)) {
    throw PeerTimeout(from, "no message from rank " + std::to_string(from) + " in time");
  }
  // An abort ends every receive, even one whose message is here: that message may belong to
  // the operation whose failure caused the abort, and must not complete this one.
  if (!have || !abort_reason_.empty()) throw_if_failed_locked(from);
  const auto it = messages_.find(key);
  take(it->second, from, out);
  if (it->second.empty()) messages_.erase(it);
}

// Requires mu_. The first queue holding a message under `tag`, scanning from the rank after
// the last one served and wrapping around, so that a busy low rank cannot starve the others.
Mailbox::Messages::iterator Mailbox::find_any(Tag tag) {
  const auto scan = [tag](auto begin, auto end) {
    for (auto it = begin; it != end; ++it) {
      if (it->first.second == tag && !it->second.empty()) return it;
    }
    return end;
  };
  const auto middle = messages_.lower_bound({next_any_, Tag{0}});
  if (const auto it = scan(middle, messages_.end()); it != messages_.end()) return it;
  if (const auto it = scan(messages_.begin(), middle); it != middle) return it;
  return messages_.end();
}

int Mailbox::take_any(Messages::iterator found, std::span<std::byte> out) {
  const int from = found->first.first;
  take(found->second, from, out);
  if (found->second.empty()) messages_.erase(found);
  next_any_ = from + 1;
  return from;
}

int Mailbox::recv_any(Tag tag, std::span<std::byte> out, const Deadline& deadline) {
  std::unique_lock lock(mu_);
  auto found = messages_.end();
  const auto ready = [&] {
    found = find_any(tag);
    return found != messages_.end() || !abort_reason_.empty();
  };
  if (!cv_.wait_until(lock, deadline.when(), ready)) {
    throw PeerTimeout(-1, "no message from any rank in time");
  }
  if (!abort_reason_.empty()) throw PeerError(abort_reason_);
  return take_any(found, out);
}

bool Mailbox::try_recv(int from, Tag tag, std::span<std::byte> out) {
  std::lock_guard lock(mu_);
  const auto it = messages_.find({from, tag});
  if (it == messages_.end() || it->second.empty() || !abort_reason_.empty()) {
    throw_if_failed_locked(from);
    return false;
  }
  take(it->second, from, out);
  if (it->second.empty()) messages_.erase(it);
  return true;
}

std::optional<int> Mailbox::try_recv_any(Tag tag, std::span<std::byte> out) {
  std::lock_guard lock(mu_);
  if (!abort_reason_.empty()) throw PeerError(abort_reason_);
  const auto found = find_any(tag);
  if (found == messages_.end()) return std::nullopt;
  return take_any(found, out);
}

bool Mailbox::has(int from, Tag tag) {
  std::lock_guard lock(mu_);
  const auto it = messages_.find({from, tag});
  return it != messages_.end() && !it->second.empty();
}

void Mailbox::throw_if_failed(int from, bool have_message) {
  std::lock_guard lock(mu_);
  if (!abort_reason_.empty() || !have_message) throw_if_failed_locked(from);
}

void Mailbox::fail_peer(int from, const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    failed_peers_.emplace(from, reason);
  }
  cv_.notify_all();
}

void Mailbox::abort(const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    if (abort_reason_.empty()) abort_reason_ = reason;
  }
  cv_.notify_all();
}

std::string Mailbox::abort_reason() {
  std::lock_guard lock(mu_);
  return abort_reason_;
}

}  // namespace weft::dist
