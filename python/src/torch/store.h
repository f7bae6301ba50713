// C10dStore: torch's store (the c10d::Store a backend's creator is given: a TCPStore, FileStore
// or HashStore under the group's PrefixStore) as the weft store its rendezvous runs on.
//
// Timeouts are weft's (the store's timeout or the call's); torch's own errors become
// weft::TimeoutError when they report a timeout, weft::Error otherwise.
#pragma once

#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "weft/store/store.h"

namespace weft::torch_backend {

class C10dStore : public store::Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys,
            std::optional<Seconds> timeout = std::nullopt) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  std::int64_t num_keys() override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace weft::torch_backend
