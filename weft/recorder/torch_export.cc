#include "weft/recorder/torch_export.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace weft::recorder {
namespace {

using nlohmann::json;

// Pickle opcodes (Python's Lib/pickletools.py documents them).
constexpr char kProto = '\x80', kStop = '.', kMark = '(', kEmptyDict = '}', kSetItems = 'u',
               kEmptyList = ']', kAppends = 'e', kBinUnicode = 'X', kBinInt = 'J', kLong1 = '\x8a',
               kBinFloat = 'G', kNewTrue = '\x88', kNewFalse = '\x89', kNone = 'N';

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

void pickle_int(std::string& out, std::int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    out += kBinInt;
    put_le(out, static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
    return;
  }
  out += kLong1;  // little-endian two's complement, 8 bytes always suffice
  out += '\x08';
  put_le(out, static_cast<std::uint64_t>(v), 8);
}

void pickle_value(std::string& out, const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      out += kEmptyDict;
      out += kMark;
      for (const auto& [key, item] : v.items()) {
        pickle_value(out, key);
        pickle_value(out, item);
      }
      out += kSetItems;
      return;
    case json::value_t::array:
      out += kEmptyList;
      out += kMark;
      for (const json& item : v) pickle_value(out, item);
      out += kAppends;
      return;
    case json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      out += kBinUnicode;
      put_le(out, s.size(), 4);
      out += s;
      return;
    }
    case json::value_t::number_integer:
      return pickle_int(out, v.get<std::int64_t>());
    case json::value_t::number_unsigned:
      return pickle_int(out, static_cast<std::int64_t>(v.get<std::uint64_t>()));
    case json::value_t::number_float: {
      out += kBinFloat;  // big-endian IEEE 754
      const auto bits = std::bit_cast<std::uint64_t>(v.get<double>());
      for (int i = 7; i >= 0; --i) out += static_cast<char>((bits >> (8 * i)) & 0xff);
      return;
    }
    case json::value_t::boolean:
      out += v.get<bool>() ? kNewTrue : kNewFalse;
      return;
    default:
      out += kNone;
  }
}

// PyTorch's names for weft's dtypes (c10::toString(ScalarType)).
const char* torch_dtype(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "Float";
    case DType::kFloat64:
      return "Double";
    case DType::kFloat16:
      return "Half";
    case DType::kBFloat16:
      return "BFloat16";
    case DType::kInt32:
      return "Int";
    case DType::kInt64:
      return "Long";
    case DType::kInt8:
      return "Char";
    case DType::kUInt8:
      return "Byte";
  }
  return "Byte";
}

// Input and output sizes as PyTorch's tensors would have them: weft records one count, the
// elements the signature compares (per rank for all_gather and gather, the output for
// reduce_scatter and scatter).
std::pair<json, json> sizes(const OpRecord& r, int group_size) {
  const auto n = static_cast<std::int64_t>(r.count);
  const auto whole = n * group_size;
  // Point-to-point records carry no count: their sizes are left out, as a barrier's are.
  if (r.op == "barrier" || r.count == kAnyCount || !r.collective)
    return {json::array(), json::array()};
  if (r.op == "all_gather" || r.op == "gather") return {{{n}}, {{whole}}};
  if (r.op == "reduce_scatter" || r.op == "scatter") return {{{whole}}, {{n}}};
  return {{{n}}, {{n}}};
}

const char* torch_state(OpState s) {
  switch (s) {
    case OpState::kIssued:
      return "scheduled";
    case OpState::kCompleted:
      return "completed";
    default:
      return "started";  // running, or failed: not completed, as PyTorch has it
  }
}

std::string torch_op(const OpRecord& r, int my_rank) {
  if (r.op == "send") return "nccl:send " + std::to_string(my_rank) + "->" + std::to_string(r.peer);
  if (r.op == "recv") return "nccl:recv " + std::to_string(my_rank) + "<-" + std::to_string(r.peer);
  if (r.op == "all_to_all_v") return "nccl:all_to_all_v_single";
  return "nccl:" + r.op;
}

// The members' job ranks: the ring's, else those whose dumps name the group.
std::vector<int> members_of(std::uint32_t id, const GroupInfo& g,
                            const std::map<int, Dump>& dumps) {
  if (!g.members.empty()) return g.members;
  std::vector<int> members;
  for (const auto& [rank, d] : dumps) {
    for (const GroupInfo& other : d.ring.groups) {
      if (other.id == id && !other.name.empty()) members.push_back(rank);
    }
  }
  return members;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "]";
}

json entry(const OpRecord& r, const GroupInfo& g, std::int64_t p2p_seq, const Dump& d) {
  // PyTorch's times are the wall clock's: the record's age at the dump, before its wall time.
  const auto wall = [&](std::int64_t ns) -> json {
    if (ns == 0) return nullptr;
    return d.dumped_unix_ms * 1'000'000 - (d.dumped_monotonic_ns - ns);
  };
  const auto [in, out] = sizes(r, g.size);
  const char* dtype = torch_dtype(r.dtype);
  json frames = json::array();
  if (!r.site.empty()) frames.push_back({{"name", r.site}, {"filename", "weft"}, {"line", 0}});
  return {{"record_id", r.id},
          {"pg_id", g.id},
          {"process_group", {std::to_string(g.id), g.name}},
          {"collective_seq_id", r.collective ? static_cast<std::int64_t>(r.seq) : 0},
          {"p2p_seq_id", p2p_seq},
          {"op_id", r.id},
          {"profiling_name", torch_op(r, g.rank)},
          {"time_created_ns", wall(r.issued_ns)},
          {"input_sizes", in},
          {"input_dtypes", in.empty() ? json::array() : json::array({dtype})},
          {"output_sizes", out},
          {"output_dtypes", out.empty() ? json::array() : json::array({dtype})},
          {"state", torch_state(r.state)},
          {"time_discovered_started_ns", wall(r.started_ns)},
          {"time_discovered_completed_ns", wall(r.state == OpState::kCompleted ? r.ended_ns : 0)},
          {"retired", r.state == OpState::kCompleted || r.state == OpState::kFailed},
          {"timeout_ms", 0},
          {"is_p2p", !r.collective},
          {"frames", std::move(frames)}};
}

json torch_dict(const Dump& d, const std::map<int, Dump>& dumps) {
  json pg_config = json::object(), pg_status = json::object(), entries = json::array();
  for (const GroupInfo& g : d.ring.groups) {
    if (g.name.empty()) continue;
    pg_config[std::to_string(g.id)] = {{"name", std::to_string(g.id)},
                                       {"desc", g.name},
                                       {"ranks", ranks_text(members_of(g.id, g, dumps))}};
    pg_status[std::to_string(g.id)] = {{"last_enqueued_collective", -1},
                                       {"last_started_collective", -1},
                                       {"last_completed_collective", -1}};
  }
  // Point-to-point numbers far above any collective's, so that PyTorch's analyser, which
  // groups neighbouring entries by these numbers, never takes one for the other.
  std::map<int, std::int64_t> p2p_seq;
  for (const OpRecord& r : d.ring.records) {
    if (r.group < 0 || r.op == "recv_any") continue;
    const GroupInfo& g = d.ring.groups[static_cast<std::size_t>(r.group)];
    const std::int64_t p2p = r.collective ? 0 : (std::int64_t{1} << 40) + ++p2p_seq[r.group];
    entries.push_back(entry(r, g, p2p, d));
    if (!r.collective) continue;
    json& status = pg_status[std::to_string(g.id)];
    const auto seq = static_cast<std::int64_t>(r.seq);
    status["last_enqueued_collective"] = seq;
    if (r.state != OpState::kIssued) status["last_started_collective"] = seq;
    if (r.state == OpState::kCompleted) status["last_completed_collective"] = seq;
  }
  return {{"version", "2.10"},
          {"comm_lib_version", "weft"},
          {"pg_config", std::move(pg_config)},
          {"pg_status", std::move(pg_status)},
          {"entries", std::move(entries)}};
}

}  // namespace

std::string pickle(const json& value) {
  std::string out{kProto, '\x02'};
  pickle_value(out, value);
  out += kStop;
  return out;
}

std::vector<std::string> export_torch(const std::map<int, Dump>& dumps, const std::string& folder,
                                      TorchFormat format) {
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error) throw SystemError("weft-fr: creating " + folder, error.value());
  std::vector<std::string> files;
  for (const auto& [rank, d] : dumps) {
    const json dict = torch_dict(d, dumps);
    std::string path =
        (std::filesystem::path(folder) / ("weft_trace_rank_" + std::to_string(rank))).string();
    if (format == TorchFormat::kJson) {
      path += ".json";
      write_file_whole(path, dict.dump(1) + "\n");
    } else {
      write_file_whole(path, pickle(dict));
    }
    files.push_back(path);
  }
  return files;
}

}  // namespace weft::recorder
