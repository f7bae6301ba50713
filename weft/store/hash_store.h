// HashStore: a Store held in this process's memory, for ranks that are threads of one
// process (and for tests). Nothing is persisted.
//
// Thread-safety: every member may be called from any thread. get and wait block the calling
// thread only, on a condition variable, until the keys are set or the timeout passes.
#pragma once

#include <condition_variable>
#include <mutex>

#include "weft/store/internal/kv_table.h"
#include "weft/store/store.h"

namespace weft::store {

class HashStore : public Store {
 public:
  HashStore() = default;
  HashStore(const HashStore&) = delete;
  HashStore& operator=(const HashStore&) = delete;

  void set(const std::string& key, const std::string& value) override;
  // Blocks up to timeout(); weft::TimeoutError names the key.
  std::string get(const std::string& key) override;
  // Throws weft::InvalidArgument if the value at `key` is not an integer that add wrote.
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys,
            std::optional<Seconds> timeout = std::nullopt) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  std::int64_t num_keys() override;

 private:
  void wait_for_keys(const std::string& what, const std::vector<std::string>& keys, Seconds timeout,
                     std::unique_lock<std::mutex>& lock);

  std::mutex mu_;
  std::condition_variable cv_;  // notified whenever a key is added or changed
  internal::KvTable table_;     // guarded by mu_
};

}  // namespace weft::store
