#include "weft/store/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "weft/base/error.h"
#include "weft/store/internal/crc32.h"

namespace weft::store {
namespace {

using namespace std::chrono_literals;

// The file format (docs/STORES.md): an 8-byte file header, then records.
constexpr std::uint32_t kFileMagic = 0x46544657;  // "WFTF" read as a little-endian u32
constexpr std::uint32_t kFileVersion = 1;
constexpr off_t kFileHeaderBytes = 8;
constexpr std::size_t kRecordHeaderBytes = 16;  // kind, key length, value length, crc32
constexpr std::uint32_t kSetRecord = 1;
constexpr std::uint32_t kDeleteRecord = 2;

// Back-off between attempts to take the lock (held for microseconds by others) and between
// looks at the file while waiting for keys (set by other processes at their own pace).
constexpr Clock::duration kLockBackoffMin = 50us, kLockBackoffMax = 5ms;
constexpr Clock::duration kPollMin = 1ms, kPollMax = 20ms;

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint32_t get_u32(const std::string& in, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(in[at + i]);
  return v;
}

void sleep_backoff(Clock::duration& backoff, Clock::duration max, const Deadline& deadline) {
  std::this_thread::sleep_for(std::min(backoff, deadline.remaining()));
  backoff = std::min(backoff * 2, max);
}

}  // namespace

// Holds flock(LOCK_EX) on the store's file and brings the store's table up to date.
// Precondition: the caller holds mu_.
class FileStore::FileLock {
 public:
  FileLock(FileStore& store, Deadline deadline) : store_(store) {
    Clock::duration backoff = kLockBackoffMin;
    // Non-blocking attempts, so that the wait has a deadline.
    while (::flock(store_.fd_.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        throw SystemError("FileStore: flock " + store_.path_, errno);
      }
      if (deadline.expired()) {
        throw TimeoutError("FileStore: could not lock " + store_.path_ +
                           " within the store's timeout; another process holds it (is one "
                           "stopped?)");
      }
      sleep_backoff(backoff, kLockBackoffMax, deadline);
    }
    try {
      store_.catch_up();
    } catch (...) {
      ::flock(store_.fd_.get(), LOCK_UN);
      throw;
    }
  }
  ~FileLock() { ::flock(store_.fd_.get(), LOCK_UN); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  FileStore& store_;
};

FileStore::FileStore(std::string path, int /*world_size*/) : path_(std::move(path)) {
  fd_.reset(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd_) throw SystemError("FileStore: open " + path_, errno);
}

FileStore::~FileStore() = default;

void FileStore::set(const std::string& key, const std::string& value) {
  internal::check_size("FileStore::set", key.size() + value.size());
  std::lock_guard lock(mu_);
  FileLock file(*this, Deadline::after(timeout()));
  append(kSetRecord, key, value);
}

std::string FileStore::get(const std::string& key) {
  return poll_for("FileStore::get", {key}, timeout());
}

std::int64_t FileStore::add(const std::string& key, std::int64_t delta) {
  internal::check_size("FileStore::add", key.size() + 20);
  std::lock_guard lock(mu_);
  FileLock file(*this, Deadline::after(timeout()));
  std::int64_t sum = 0;
  if (const std::string* v = table_.find(key)) sum = internal::parse_counter(key, *v);
  if (__builtin_add_overflow(sum, delta, &sum)) {
    throw InvalidArgument("FileStore::add: key '" + key + "' would overflow int64");
  }
  append(kSetRecord, key, std::to_string(sum));
  return sum;
}

std::string FileStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  internal::check_size("FileStore::compare_set", key.size() + desired.size());
  std::lock_guard lock(mu_);
  FileLock file(*this, Deadline::after(timeout()));
  // KvTable::compare_set's rules, decided before anything changes: the table follows the
  // file only once the record is written.
  const std::string* current = table_.find(key);
  const bool swap = current == nullptr ? expected.empty() : *current == expected;
  if (swap) {
    append(kSetRecord, key, desired);
    return desired;
  }
  return current == nullptr ? expected : *current;
}

void FileStore::wait(const std::vector<std::string>& keys, std::optional<Seconds> timeout) {
  poll_for("FileStore::wait", keys, timeout.value_or(this->timeout()));
}

bool FileStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  FileLock file(*this, Deadline::after(timeout()));
  return table_.missing(keys).empty();
}

bool FileStore::delete_key(const std::string& key) {
  std::lock_guard lock(mu_);
  FileLock file(*this, Deadline::after(timeout()));
  if (table_.find(key) == nullptr) return false;
  append(kDeleteRecord, key, "");
  return true;
}

std::int64_t FileStore::num_keys() {
  std::lock_guard lock(mu_);
  FileLock file(*this, Deadline::after(timeout()));
  return table_.size();
}

std::string FileStore::poll_for(const std::string& what, const std::vector<std::string>& keys,
                                Seconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  Clock::duration backoff = kPollMin;
  while (true) {
    {
      std::lock_guard lock(mu_);
      FileLock file(*this, deadline);
      const std::vector<std::string> missing = table_.missing(keys);
      if (missing.empty()) return keys.empty() ? "" : *table_.find(keys[0]);
      if (deadline.expired()) {
        throw TimeoutError(
            internal::timeout_message(what + " (" + path_ + ")", missing, keys.size(), timeout));
      }
    }
    sleep_backoff(backoff, kPollMax, deadline);
  }
}

// Replays the records appended since offset_. Runs under the file lock, so no live writer
// is mid-append: an incomplete record at the end was torn by a writer that died, and is cut.
void FileStore::catch_up() {
  struct stat st;
  if (::fstat(fd_.get(), &st) != 0) throw SystemError("FileStore: fstat " + path_, errno);
  if (offset_ == 0) {
    read_file_header();
    if (::fstat(fd_.get(), &st) != 0) throw SystemError("FileStore: fstat " + path_, errno);
  }
  if (st.st_size < offset_) corrupt(st.st_size, "the file shrank below what was already read");
  std::string bytes(static_cast<std::size_t>(st.st_size - offset_), '\0');
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::pread(fd_.get(), bytes.data() + got, bytes.size() - got, offset_ + got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw SystemError("FileStore: read " + path_, errno);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  std::size_t at = 0;
  while (got - at >= kRecordHeaderBytes) {
    const std::uint32_t kind = get_u32(bytes, at), key_len = get_u32(bytes, at + 4),
                        value_len = get_u32(bytes, at + 8), crc = get_u32(bytes, at + 12);
    const std::size_t body = std::size_t{key_len} + value_len;
    if ((kind != kSetRecord && kind != kDeleteRecord) || body > internal::kMaxRecordBytes) {
      corrupt(offset_ + at, "bad record header");
    }
    if (got - at - kRecordHeaderBytes < body) break;  // torn
    const std::string_view record(bytes.data() + at, kRecordHeaderBytes + body);
    const std::uint32_t actual =
        internal::crc32(record.substr(kRecordHeaderBytes), internal::crc32(record.substr(0, 12)));
    if (actual != crc) corrupt(offset_ + at, "checksum mismatch");
    std::string key(record.substr(kRecordHeaderBytes, key_len));
    if (kind == kSetRecord) {
      table_.set(key, std::string(record.substr(kRecordHeaderBytes + key_len)));
    } else {
      table_.erase(key);
    }
    at += record.size();
  }
  offset_ += static_cast<off_t>(at);
  if (at < got && ::ftruncate(fd_.get(), offset_) != 0) {
    throw SystemError("FileStore: cutting a torn record off " + path_, errno);
  }
}

// Writes the header into an empty file, or checks the one that is there. A file shorter
// than its header was torn by a creator that died, and is started over.
void FileStore::read_file_header() {
  std::string header(kFileHeaderBytes, '\0');
  const ssize_t n = ::pread(fd_.get(), header.data(), header.size(), 0);
  if (n < 0) throw SystemError("FileStore: read " + path_, errno);
  if (n < kFileHeaderBytes) {
    header.clear();
    put_u32(header, kFileMagic);
    put_u32(header, kFileVersion);
    write_at(header, 0);
  } else if (get_u32(header, 0) != kFileMagic || get_u32(header, 4) != kFileVersion) {
    throw Error("FileStore: " + path_ +
                " is not a version-1 FileStore file (its header does not match); pass a path "
                "that is new or that only FileStores have written");
  }
  offset_ = kFileHeaderBytes;
}

void FileStore::append(std::uint32_t kind, const std::string& key, const std::string& value) {
  std::string record;
  record.reserve(kRecordHeaderBytes + key.size() + value.size());
  put_u32(record, kind);
  put_u32(record, static_cast<std::uint32_t>(key.size()));
  put_u32(record, static_cast<std::uint32_t>(value.size()));
  const std::uint32_t crc = internal::crc32(value, internal::crc32(key, internal::crc32(record)));
  put_u32(record, crc);
  record += key;
  record += value;
  // offset_ is the end of the file: catch_up read (or cut) everything, and the lock keeps
  // other writers out. A failed write leaves a torn record that the next writer cuts.
  write_at(record, offset_);
  offset_ += static_cast<off_t>(record.size());
  if (kind == kSetRecord) {
    table_.set(key, value);
  } else {
    table_.erase(key);
  }
}

void FileStore::write_at(const std::string& bytes, off_t offset) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd_.get(), bytes.data() + done, bytes.size() - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw SystemError("FileStore: write " + path_, errno);
    done += static_cast<std::size_t>(n);
  }
}

void FileStore::corrupt(off_t offset, const std::string& why) const {
  throw Error("FileStore: " + path_ + " is corrupt at byte " + std::to_string(offset) + " (" + why +
              "); something other than a FileStore wrote to it. Delete it and restart "
              "the job with a fresh path");
}

}  // namespace weft::store
