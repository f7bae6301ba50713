#include "weft/store/hash_store.h"

#include "weft/base/error.h"

namespace weft::store {

void HashStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mu_);
    table_.set(key, value);
  }
  cv_.notify_all();
}

std::string HashStore::get(const std::string& key) {
  std::unique_lock lock(mu_);
  wait_for_keys("HashStore::get", {key}, timeout(), lock);
  return *table_.find(key);
}

std::int64_t HashStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t sum = 0;
  {
    std::lock_guard lock(mu_);
    sum = table_.add(key, delta);
  }
  cv_.notify_all();
  return sum;
}

std::string HashStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  std::string now;
  {
    std::lock_guard lock(mu_);
    now = table_.compare_set(key, expected, desired);
  }
  cv_.notify_all();
  return now;
}

void HashStore::wait(const std::vector<std::string>& keys, std::optional<Seconds> timeout) {
  std::unique_lock lock(mu_);
  wait_for_keys("HashStore::wait", keys, timeout.value_or(this->timeout()), lock);
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  return table_.missing(keys).empty();
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard lock(mu_);
  return table_.erase(key);
}

std::int64_t HashStore::num_keys() {
  std::lock_guard lock(mu_);
  return table_.size();
}

void HashStore::wait_for_keys(const std::string& what, const std::vector<std::string>& keys,
                              Seconds timeout, std::unique_lock<std::mutex>& lock) {
  const Deadline deadline = Deadline::after(timeout);
  const bool ready =
      internal::wait_until(cv_, lock, deadline, [&] { return table_.missing(keys).empty(); });
  if (!ready) {
    throw TimeoutError(internal::timeout_message(what, table_.missing(keys), keys.size(), timeout));
  }
}

}  // namespace weft::store
