// PrefixStore: a view of another store in which every key is "<prefix>/<key>", so that
// groups of ranks (a subgroup, a restart generation) can share one store without their
// keys meeting. As torch.distributed.PrefixStore.
//
// Thread-safety: as the underlying store. Blocking and errors: as the underlying store's,
// with this store's timeout() (initially the underlying store's) bounding get and wait;
// error messages name the prefixed keys.
#pragma once

#include <memory>
#include <string>

#include "weft/store/store.h"

namespace weft::store {

class PrefixStore : public Store {
 public:
  // Precondition: `base` is not null (weft::InvalidArgument otherwise). The prefix may be
  // empty (keys become "/<key>"). Copies base->timeout().
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys,
            std::optional<Seconds> timeout = std::nullopt) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  // The underlying store's count, all prefixes together (as torch does): a store cannot
  // count the keys under one prefix without listing them, which Store does not offer.
  std::int64_t num_keys() override;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& underlying_store() const { return base_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace weft::store
