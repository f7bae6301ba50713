// FileStore: a Store kept in a file that several processes open by path, for jobs whose
// ranks share a machine (or a file system whose flock() works across its clients, which
// many network file systems' do not). As torch.distributed.FileStore.
//
// The file is an append-only log of checksummed records (docs/STORES.md). Every operation
// takes flock(LOCK_EX) on it, reads the records other processes appended since this object
// last looked, and appends its own; a record torn by a writer that died mid-write is cut
// off by the next writer. The file grows with every set and add and is never compacted or
// deleted by the store: give each job a fresh path and remove the file when the job ends.
//
// Thread-safety: every member may be called from any thread; objects in several processes
// (or several objects in one) may use the same path at once. get and wait poll the file
// with a short sleep (1 to 20 ms) until the keys appear or the timeout passes. Taking the
// lock also waits at most the store's timeout (weft::TimeoutError), so a process stopped
// while holding it cannot hang the others forever.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>

#include "weft/base/unique_fd.h"
#include "weft/store/internal/kv_table.h"
#include "weft/store/store.h"

namespace weft::store {

class FileStore : public Store {
 public:
  // Opens `path`, creating it (mode 0600) if absent. `world_size` is accepted for torch's
  // signature and unused. Throws weft::SystemError if the file cannot be opened, and
  // weft::Error on first use if it is not a FileStore file.
  explicit FileStore(std::string path, int world_size = -1);
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  // set, add and compare_set throw weft::InvalidArgument when key + value exceed 64 MiB,
  // weft::SystemError when the file cannot be written (a full disk), and weft::Error when
  // the file holds a corrupt record (it was modified by something other than a FileStore).
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

  const std::string& path() const { return path_; }

 private:
  class FileLock;
  // Polls until every key exists; returns the value of keys[0]. Throws weft::TimeoutError.
  std::string poll_for(const std::string& what, const std::vector<std::string>& keys,
                       Seconds timeout);
  void catch_up();
  void read_file_header();
  void append(std::uint32_t kind, const std::string& key, const std::string& value);
  void write_at(const std::string& bytes, off_t offset);
  [[noreturn]] void corrupt(off_t offset, const std::string& why) const;

  const std::string path_;
  UniqueFd fd_;
  // Serializes this object's users: flock() does not exclude threads sharing a descriptor.
  std::mutex mu_;
  internal::KvTable table_;  // the file's contents up to offset_; guarded by mu_
  off_t offset_ = 0;         // bytes of the file replayed into table_; guarded by mu_
};

}  // namespace weft::store
