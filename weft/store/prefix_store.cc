#include "weft/store/prefix_store.h"

#include "weft/base/error.h"

namespace weft::store {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  if (!base_) throw InvalidArgument("PrefixStore: the underlying store is null");
  set_timeout(base_->timeout());
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) {
  base_->set(full(key), value);
}

std::string PrefixStore::get(const std::string& key) {
  // Waiting first applies this store's timeout, which may differ from the base's. The base's
  // get then finds the key at once (unless it is deleted in between, when it waits anew).
  const std::string k = full(key);
  base_->wait({k}, timeout());
  return base_->get(k);
}

std::int64_t PrefixStore::add(const std::string& key, std::int64_t delta) {
  return base_->add(full(key), delta);
}

std::string PrefixStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired) {
  return base_->compare_set(full(key), expected, desired);
}

void PrefixStore::wait(const std::vector<std::string>& keys, std::optional<Seconds> timeout) {
  base_->wait(full(keys), timeout.value_or(this->timeout()));
}

bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(full(keys)); }

bool PrefixStore::delete_key(const std::string& key) { return base_->delete_key(full(key)); }

std::int64_t PrefixStore::num_keys() { return base_->num_keys(); }

}  // namespace weft::store
