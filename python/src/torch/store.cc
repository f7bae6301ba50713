#include "python/src/torch/store.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "weft/base/error.h"

namespace weft::torch_backend {
namespace {

std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<std::uint8_t>& b) { return {b.begin(), b.end()}; }

// Runs `call` on torch's store, its errors rethrown as weft's.
template <class Call>
auto translated(const char* what, Call call) {
  try {
    return call();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string message = std::string("torch's store: ") + what + ": " + e.what();
    if (message.find("imeout") != std::string::npos) throw TimeoutError(message);
    throw Error(message);
  }
}

std::string joined(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
  return s;
}

}  // namespace

void C10dStore::set(const std::string& key, const std::string& value) {
  translated("set", [&] { store_->set(key, bytes(value)); });
}

std::string C10dStore::get(const std::string& key) {
  wait({key});
  return translated("get", [&] { return text(store_->get(key)); });
}

std::int64_t C10dStore::add(const std::string& key, std::int64_t delta) {
  return translated("add", [&] { return store_->add(key, delta); });
}

std::string C10dStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  return translated("compare_set",
                    [&] { return text(store_->compareSet(key, bytes(expected), bytes(desired))); });
}

void C10dStore::wait(const std::vector<std::string>& keys, std::optional<Seconds> timeout) {
  const auto limit =
      std::chrono::duration_cast<std::chrono::milliseconds>(timeout.value_or(this->timeout()));
  const std::string what = "waiting for " + joined(keys);
  translated(what.c_str(),
             [&] { store_->wait(keys, std::max(limit, std::chrono::milliseconds(1))); });
}

bool C10dStore::check(const std::vector<std::string>& keys) {
  return translated("check", [&] { return store_->check(keys); });
}

bool C10dStore::delete_key(const std::string& key) {
  return translated("delete_key", [&] { return store_->deleteKey(key); });
}

std::int64_t C10dStore::num_keys() {
  return translated("num_keys", [&] { return store_->getNumKeys(); });
}

}  // namespace weft::torch_backend
