#include "weft/dist/engine/tuning.h"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "weft/base/error.h"

namespace weft::dist {
namespace {

constexpr std::size_t kMaxThreshold = std::size_t{1} << 48;  // "never" is any value past 64 MiB
constexpr std::size_t kMaxTableBytes = 64 << 10;

// The thresholds by their names in the table.
std::vector<std::pair<const char*, std::size_t CollectiveTuning::*>> thresholds() {
  return {{"one_step_all_reduce_max", &CollectiveTuning::one_step_all_reduce_max},
          {"single_copy_all_reduce_min", &CollectiveTuning::single_copy_all_reduce_min},
          {"single_copy_all_reduce_max", &CollectiveTuning::single_copy_all_reduce_max},
          {"single_copy_broadcast_min", &CollectiveTuning::single_copy_broadcast_min},
          {"single_copy_broadcast_max", &CollectiveTuning::single_copy_broadcast_max},
          {"single_copy_all_gather_min", &CollectiveTuning::single_copy_all_gather_min},
          {"single_copy_all_gather_max", &CollectiveTuning::single_copy_all_gather_max},
          {"in_place_all_reduce_min", &CollectiveTuning::in_place_all_reduce_min},
          {"in_place_broadcast_min", &CollectiveTuning::in_place_broadcast_min},
          {"ring_all_reduce_min", &CollectiveTuning::ring_all_reduce_min}};
}

std::string trimmed(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::size_t number(const std::string& value, std::size_t max, const std::string& where) {
  std::size_t n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size() || n > max) {
    throw InvalidArgument(where + ": '" + value + "' is not a whole number up to " +
                          std::to_string(max));
  }
  return n;
}

std::string file_name_part(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out += c;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

}  // namespace

std::filesystem::path default_table_path(const TuningKey& key) {
  std::filesystem::path cache;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    cache = xdg;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    cache = std::filesystem::path(home) / ".cache";
  } else {
    return {};  // no cache of the user's: no table
  }
  return cache / "weft" / "collectives" /
         (key.backend + "-" + std::to_string(key.ranks) + "-" + file_name_part(key.cpu) + ".table");
}

std::optional<std::filesystem::path> table_path(const TuningKey& key) {
  const char* set = std::getenv("WEFT_COLLECTIVE_TABLE");
  if (set == nullptr || *set == '\0') {
    std::filesystem::path path = default_table_path(key);
    if (path.empty()) return std::nullopt;
    return path;
  }
  if (std::string(set) == "off") return std::nullopt;
  return std::filesystem::path(set);
}

std::string format_table(const TuningKey& key, const CollectiveTuning& tuning) {
  std::ostringstream out;
  out << "# weft's collective algorithm thresholds (bytes), measured by weft-bench --tune\n"
      << "cpu = " << key.cpu << "\nbackend = " << key.backend << "\nranks = " << key.ranks << "\n";
  for (const auto& [name, field] : thresholds()) out << name << " = " << tuning.*field << "\n";
  return out.str();
}

CollectiveTuning parse_table(const std::string& text, TuningKey* key) {
  CollectiveTuning tuning;
  TuningKey read;
  std::map<std::string, bool> seen;
  std::istringstream in(text);
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    const std::string where = "collective table, line " + std::to_string(line_number);
    line = trimmed(line);
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) throw InvalidArgument(where + ": expected 'name = value'");
    const std::string name = trimmed(line.substr(0, eq)), value = trimmed(line.substr(eq + 1));
    if (seen[name]) throw InvalidArgument(where + ": '" + name + "' given twice");
    seen[name] = true;
    if (name == "cpu") {
      read.cpu = value;
    } else if (name == "backend") {
      read.backend = value;
    } else if (name == "ranks") {
      read.ranks = static_cast<int>(number(value, 1 << 20, where));
    } else {
      bool known = false;
      for (const auto& [threshold, field] : thresholds()) {
        if (name != threshold) continue;
        tuning.*field = number(value, kMaxThreshold, where);
        known = true;
      }
      if (!known) throw InvalidArgument(where + ": unknown name '" + name + "'");
    }
  }
  for (const char* required : {"cpu", "backend", "ranks"}) {
    if (!seen[required])
      throw InvalidArgument("collective table: no '" + std::string(required) + "'");
  }
  for (const auto& [threshold, field] : thresholds()) {
    if (!seen[threshold])
      throw InvalidArgument("collective table: no '" + std::string(threshold) + "'");
  }
  if (key != nullptr) *key = read;
  return tuning;
}

std::optional<CollectiveTuning> read_table(const TuningKey& key, std::string* why) {
  const std::optional<std::filesystem::path> path = table_path(key);
  std::error_code ec;
  if (!path || !std::filesystem::is_regular_file(*path, ec)) return std::nullopt;  // not a FIFO
  std::ifstream in(*path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(kMaxTableBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  try {
    if (text.size() > kMaxTableBytes) throw InvalidArgument("collective table: over 64 KiB");
    TuningKey measured;
    const CollectiveTuning tuning = parse_table(text, &measured);
    if (measured.cpu != key.cpu || measured.backend != key.backend || measured.ranks != key.ranks) {
      if (why != nullptr) {
        *why = path->string() + " was measured for " + measured.backend + " on " +
               std::to_string(measured.ranks) + " ranks of " + measured.cpu + ", not this job (" +
               key.backend + ", " + std::to_string(key.ranks) + ", " + key.cpu +
               "): using the defaults; weft-bench --tune measures this machine";
      }
      return std::nullopt;
    }
    return tuning;
  } catch (const Error& e) {
    if (why != nullptr) {
      *why = path->string() + ": " + e.what() +
             "; using the defaults; weft-bench --tune measures this machine again";
    }
    return std::nullopt;
  }
}

void write_table(const std::filesystem::path& path, const TuningKey& key,
                 const CollectiveTuning& tuning) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) throw Error("cannot make " + path.parent_path().string() + ": " + ec.message());
  const std::filesystem::path temporary =
      path.string() + ".tmp" + std::to_string(static_cast<long>(::getpid()));
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << format_table(key, tuning);
    out.flush();
    if (!out) {
      std::filesystem::remove(temporary, ec);
      throw Error("cannot write " + temporary.string());
    }
  }
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(temporary, ec);
    throw Error("cannot write " + path.string() + ": " + why);
  }
}

std::int64_t fingerprint(const CollectiveTuning& tuning) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the thresholds
  for (const auto& [name, field] : thresholds()) {
    std::uint64_t v = tuning.*field;
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  }
  return static_cast<std::int64_t>((h >> 1) | 1);
}

}  // namespace weft::dist
