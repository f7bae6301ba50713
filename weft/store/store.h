// Store: the small key-value interface ranks rendezvous through (torch.distributed's Store).
// Keys are strings; values are byte strings (std::string used as bytes).
//
// Every blocking call waits at most the store's timeout (default 300 s, set_timeout) or the
// timeout given, then throws weft::TimeoutError naming the keys it waited for. All
// implementations are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "weft/base/deadline.h"

namespace weft::store {

inline constexpr Seconds kDefaultStoreTimeout{300};

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting until some rank sets it or the timeout passes.
  virtual std::string get(const std::string& key) = 0;
  // Adds `delta` to the integer at `key` (absent counts as 0) and returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // Sets `key` to `desired` if its value is `expected` (an absent key matches an empty
  // `expected`); returns the value `key` holds afterwards, as torch's compare_set does.
  // Like torch, an absent key with a non-empty `expected` stays absent and the call returns
  // `expected` (docs/STORES.md).
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  // Waits until every key exists (weft::TimeoutError names the missing ones).
  virtual void wait(const std::vector<std::string>& keys,
                    std::optional<Seconds> timeout = std::nullopt) = 0;
  // True if every key exists now; does not wait.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Deletes `key`; true if it existed.
  virtual bool delete_key(const std::string& key) = 0;
  virtual std::int64_t num_keys() = 0;

  Seconds timeout() const { return timeout_.load(); }
  void set_timeout(Seconds timeout) { timeout_.store(timeout); }

 private:
  std::atomic<Seconds> timeout_{kDefaultStoreTimeout};
};

}  // namespace weft::store
