#include "weft/store/internal/kv_table.h"

#include <charconv>
#include <cstdio>

#include "weft/base/error.h"

namespace weft::store::internal {

const std::string* KvTable::find(const std::string& key) const {
  const auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

std::int64_t parse_counter(const std::string& key, const std::string& value) {
  std::int64_t n = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, n);
  if (ec != std::errc() || ptr != end || value.empty()) {
    throw InvalidArgument("add: key '" + key + "' holds a value that is not a decimal integer (" +
                          std::to_string(value.size()) +
                          " bytes); use add only on keys that add created, or delete it first");
  }
  return n;
}

std::int64_t KvTable::add(const std::string& key, std::int64_t delta) {
  std::int64_t current = 0;
  if (const std::string* v = find(key)) current = parse_counter(key, *v);
  std::int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    throw InvalidArgument("add: key '" + key + "' would overflow int64 (" +
                          std::to_string(current) + " + " + std::to_string(delta) + ")");
  }
  map_[key] = std::to_string(sum);
  return sum;
}

std::string KvTable::compare_set(const std::string& key, const std::string& expected,
                                 std::string desired) {
  const auto it = map_.find(key);
  const bool swap = it == map_.end() ? expected.empty() : it->second == expected;
  if (it == map_.end()) {
    if (!swap) return expected;
    map_.emplace(key, desired);
    return desired;
  }
  if (swap) it->second = std::move(desired);
  return it->second;
}

std::vector<std::string> KvTable::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    if (!map_.contains(k)) out.push_back(k);
  }
  return out;
}

std::string describe_keys(const std::vector<std::string>& keys, std::size_t total) {
  constexpr std::size_t kShown = 8;
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i > 0) out += ", ";
    out += "'" + keys[i] + "'";
  }
  if (keys.size() > kShown) out += ", ...";
  if (total > 1) {
    out += " (" + std::to_string(keys.size()) + " of " + std::to_string(total) + " keys)";
  }
  return out;
}

std::string timeout_message(const std::string& what, const std::vector<std::string>& missing,
                            std::size_t total, Seconds timeout) {
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.3g", timeout.count());
  return what + ": " + describe_keys(missing, total) + " not set within " + secs +
         " s; check that the ranks that set them are running, or allow more time "
         "(Store::set_timeout)";
}

void check_size(const std::string& what, std::size_t bytes) {
  if (bytes > kMaxRecordBytes) {
    throw InvalidArgument(what + ": " + std::to_string(bytes) +
                          " bytes of keys and values, more "
                          "than a store record may hold (" +
                          std::to_string(kMaxRecordBytes >> 20) +
                          " MiB); keep large data out of the store");
  }
}

}  // namespace weft::store::internal
