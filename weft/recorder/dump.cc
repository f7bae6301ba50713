#include "weft/recorder/dump.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "weft/base/unique_fd.h"

namespace weft::recorder {
namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "weft-flight-recorder";
constexpr int kVersion = 1;
// A dump of kRingRecords records is about 2 MB; anything much larger is not one.
constexpr std::size_t kMaxDumpBytes = 64u << 20;

json group_json(const GroupInfo& g) {
  return {
      {"id", g.id}, {"name", g.name}, {"size", g.size}, {"rank", g.rank}, {"members", g.members}};
}

json record_json(const OpRecord& r) {
  return {{"id", r.id},
          {"seq", r.seq},
          {"group", r.group},
          {"op", r.op},
          {"collective", r.collective},
          {"count", r.count},
          {"dtype", dtype_name(r.dtype)},
          {"root", r.root},
          {"peer", r.peer},
          {"reduce", r.reduce},
          {"site", r.site},
          {"state", state_name(r.state)},
          {"issued_ns", r.issued_ns},
          {"started_ns", r.started_ns},
          {"ended_ns", r.ended_ns}};
}

// The checks a field gets: present, of its type, within bounds.
class Reader {
 public:
  Reader(const json& object, const std::string& where) : object_(object), where_(where) {
    if (!object.is_object()) fail("is not a JSON object");
  }

  template <typename T>
  T number(const char* key, T lo, T hi) const {
    const json& v = field(key);
    if (!v.is_number_integer()) fail(std::string("'") + key + "' is not an integer");
    const auto n = v.get<std::int64_t>();
    if (v.is_number_unsigned()
            ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)
            : n < static_cast<std::int64_t>(lo) || n > static_cast<std::int64_t>(hi)) {
      fail(std::string("'") + key + "' is out of range");
    }
    return v.is_number_unsigned() ? static_cast<T>(v.get<std::uint64_t>()) : static_cast<T>(n);
  }

  std::string text(const char* key, std::size_t max_bytes) const {
    const json& v = field(key);
    if (!v.is_string()) fail(std::string("'") + key + "' is not a string");
    auto s = v.get<std::string>();
    if (s.size() > max_bytes) fail(std::string("'") + key + "' is too long");
    return s;
  }

  bool flag(const char* key) const {
    const json& v = field(key);
    if (!v.is_boolean()) fail(std::string("'") + key + "' is not true or false");
    return v.get<bool>();
  }

  const json& array(const char* key, std::size_t max_size) const {
    const json& v = field(key);
    if (!v.is_array()) fail(std::string("'") + key + "' is not an array");
    if (v.size() > max_size) fail(std::string("'") + key + "' has too many entries");
    return v;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw DumpError("flight recorder dump " + where_ + ": " + what);
  }

 private:
  const json& field(const char* key) const {
    const auto it = object_.find(key);
    if (it == object_.end()) fail(std::string("'") + key + "' is missing");
    return *it;
  }

  const json& object_;
  std::string where_;
};

OpState parse_state(const Reader& in, const std::string& name) {
  for (const OpState s :
       {OpState::kIssued, OpState::kStarted, OpState::kCompleted, OpState::kFailed}) {
    if (name == state_name(s)) return s;
  }
  in.fail("state '" + name + "' is not issued, started, completed or failed");
}

OpRecord parse_record(const json& object, const std::string& where, int groups) {
  const Reader in(object, where);
  OpRecord r;
  constexpr auto kMax64 = std::numeric_limits<std::int64_t>::max();
  r.id = in.number<std::uint64_t>("id", 0, kMax64);
  r.seq = in.number<std::uint64_t>("seq", 0, kMax64);
  r.group = in.number<int>("group", -1, groups - 1);
  r.op = in.text("op", sizeof(Record::op) - 1);
  r.collective = in.flag("collective");
  r.count = in.number<std::uint64_t>("count", 0, std::numeric_limits<std::uint64_t>::max());
  try {
    r.dtype = parse_dtype(in.text("dtype", 16));
  } catch (const InvalidArgument& e) {
    in.fail(e.what());
  }
  r.root = in.number<int>("root", -1, std::numeric_limits<int>::max());
  r.peer = in.number<int>("peer", -1, std::numeric_limits<int>::max());
  r.reduce = in.text("reduce", sizeof(Record::reduce) - 1);
  r.site = in.text("site", sizeof(Record::site) - 1);
  r.state = parse_state(in, in.text("state", 16));
  r.issued_ns = in.number<std::int64_t>("issued_ns", 0, kMax64);
  r.started_ns = in.number<std::int64_t>("started_ns", 0, kMax64);
  r.ended_ns = in.number<std::int64_t>("ended_ns", 0, kMax64);
  return r;
}

GroupInfo parse_group(const json& object, const std::string& where) {
  const Reader in(object, where);
  GroupInfo g;
  g.id = in.number<std::uint32_t>("id", 0, std::numeric_limits<std::uint32_t>::max());
  g.name = in.text("name", sizeof(GroupSlot::name) - 1);
  g.size = in.number<int>("size", 1, std::numeric_limits<int>::max());
  g.rank = in.number<int>("rank", 0, g.size - 1);
  const json& members = in.array("members", static_cast<std::size_t>(g.size));
  for (const json& m : members) {
    if (!m.is_number_integer() || m.get<std::int64_t>() < 0 ||
        m.get<std::int64_t>() > std::numeric_limits<int>::max()) {
      in.fail("'members' holds something other than ranks");
    }
    g.members.push_back(m.get<int>());
  }
  if (!g.members.empty() && g.members.size() != static_cast<std::size_t>(g.size)) {
    in.fail("'members' names " + std::to_string(g.members.size()) + " ranks of " +
            std::to_string(g.size));
  }
  return g;
}

}  // namespace

Dump dump_of(RingSnapshot ring, std::string status) {
  Dump d{.ring = std::move(ring), .status = std::move(status)};
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) d.host = host;
  d.dumped_monotonic_ns = coarse_clock_ns();
  d.dumped_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  return d;
}

std::string dump_json(const Dump& d) {
  json groups = json::array(), records = json::array();
  for (const GroupInfo& g : d.ring.groups) groups.push_back(group_json(g));
  for (const OpRecord& r : d.ring.records) records.push_back(record_json(r));
  const json out = {{"format", kFormat},
                    {"version", kVersion},
                    {"rank", d.ring.rank},
                    {"world_size", d.ring.world_size},
                    {"pid", d.ring.pid},
                    {"host", d.host},
                    {"status", d.status},
                    {"dumped_monotonic_ns", d.dumped_monotonic_ns},
                    {"dumped_unix_ms", d.dumped_unix_ms},
                    {"groups", std::move(groups)},
                    {"records", std::move(records)}};
  return out.dump(1) + "\n";
}

Dump parse_dump(std::string_view text, const std::string& source) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw DumpError("flight recorder dump " + source + ": not JSON (" + e.what() + ")");
  }
  const Reader in(root, source);
  if (in.text("format", 64) != kFormat) in.fail("not a weft flight recorder dump");
  if (in.number<int>("version", 0, 1 << 20) != kVersion) {
    in.fail("version " + root["version"].dump() + ", where this weft reads " +
            std::to_string(kVersion));
  }
  Dump d;
  constexpr auto kMaxInt = std::numeric_limits<int>::max();
  d.ring.world_size = in.number<int>("world_size", 0, kMaxInt);
  d.ring.rank = in.number<int>("rank", kSeveralRanks, kMaxInt);
  d.ring.pid = in.number<int>("pid", 0, kMaxInt);
  d.host = in.text("host", 255);
  d.status = in.text("status", 4096);
  d.dumped_monotonic_ns =
      in.number<std::int64_t>("dumped_monotonic_ns", 0, std::numeric_limits<std::int64_t>::max());
  d.dumped_unix_ms =
      in.number<std::int64_t>("dumped_unix_ms", 0, std::numeric_limits<std::int64_t>::max());
  for (const json& g : in.array("groups", kMaxGroups)) {
    d.ring.groups.push_back(
        parse_group(g, source + " group " + std::to_string(d.ring.groups.size())));
  }
  const int groups = static_cast<int>(d.ring.groups.size());
  for (const json& r : in.array("records", kRingRecords)) {
    d.ring.records.push_back(
        parse_record(r, source + " record " + std::to_string(d.ring.records.size()), groups));
  }
  return d;
}

void write_file_whole(const std::string& path, std::string_view text) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  UniqueFd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) throw SystemError("flight recorder: creating " + temporary, errno);
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::unlink(temporary.c_str());
      throw SystemError("flight recorder: writing " + temporary, err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temporary.c_str());
    throw SystemError("flight recorder: renaming " + temporary + " to " + path, err);
  }
}

void write_dump(const std::string& path, const Dump& dump) {
  write_file_whole(path, dump_json(dump));
}

Dump read_dump(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SystemError("flight recorder: opening " + path, errno);
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxDumpBytes)
      throw DumpError("flight recorder dump " + path + ": too large");
  }
  return parse_dump(text, path);
}

}  // namespace weft::recorder
