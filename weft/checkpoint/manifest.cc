#include "weft/checkpoint/manifest.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "weft/checkpoint/checksum.h"

namespace weft::checkpoint {
namespace {

// One JSON type for reading and writing (each instantiation is seconds of compile time);
// ordered, so a manifest lists its fields in the order docs/CHECKPOINTS.md does.
using json = nlohmann::ordered_json;

constexpr char kFormat[] = "weft-distributed-checkpoint";

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw CheckpointError("checkpoint manifest " + path + " is not usable: " + what +
                        "; resume from an earlier checkpoint");
}

// A field of `object` as T, or bad() naming it.
template <class T>
T field(const json& object, const char* key, const std::string& where, const std::string& path) {
  if (!object.is_object() || !object.contains(key)) bad(path, where + " has no '" + key + "'");
  try {
    return object.at(key).get<T>();
  } catch (const json::exception&) {
    bad(path, where + "'s '" + key + "' is " + object.at(key).dump() + ", of the wrong type");
  }
}

void check_box(const Box& box, const Shape& shape, const std::string& where,
               const std::string& path) {
  bool ok = box.offsets.size() == shape.size() && box.sizes.size() == shape.size();
  for (std::size_t d = 0; ok && d < shape.size(); ++d) {
    ok = box.offsets[d] >= 0 && box.sizes[d] >= 0 && box.offsets[d] <= shape[d] &&
         box.sizes[d] <= shape[d] - box.offsets[d];
  }
  if (!ok)
    bad(path, where + " " + box_string(box) + " lies outside its shape " + shape_string(shape));
}

FileEntry parse_file(const json& j, int world_size, const std::string& path) {
  FileEntry f;
  f.name = field<std::string>(j, "name", "a file", path);
  const std::string where = "file " + f.name;
  if (f.name.empty() || f.name.find('/') != std::string::npos || f.name[0] == '.')
    bad(path, where + ": not a plain file name");
  f.rank = field<int>(j, "rank", where, path);
  f.bytes = field<std::uint64_t>(j, "bytes", where, path);
  f.header_bytes = field<std::uint64_t>(j, "header_bytes", where, path);
  f.header_checksum = parse_checksum(field<std::string>(j, "header_checksum", where, path), path);
  if (f.rank < 0 || f.rank >= world_size)
    bad(path, where + ": rank " + std::to_string(f.rank) + " outside the world");
  if (f.header_bytes < 8 || f.header_bytes > f.bytes)
    bad(path, where + ": header of " + std::to_string(f.header_bytes) + " bytes in a file of " +
                  std::to_string(f.bytes));
  return f;
}

ChunkEntry parse_chunk(const json& j, const TensorEntry& t, const std::vector<FileEntry>& files,
                       const std::string& where, const std::string& path) {
  ChunkEntry c;
  c.box.offsets = field<std::vector<std::int64_t>>(j, "offsets", where, path);
  c.box.sizes = field<std::vector<std::int64_t>>(j, "sizes", where, path);
  check_box(c.box, t.shape, where, path);
  c.file = field<int>(j, "file", where, path);
  const auto range = field<std::vector<std::uint64_t>>(j, "data_offsets", where, path);
  c.checksum = parse_checksum(field<std::string>(j, "checksum", where, path), path);
  if (c.file < 0 || static_cast<std::size_t>(c.file) >= files.size())
    bad(path,
        where + " names file " + std::to_string(c.file) + " of " + std::to_string(files.size()));
  if (range.size() != 2) bad(path, where + ": data_offsets is not [begin, end]");
  c.begin = range[0];
  c.end = range[1];
  const FileEntry& f = files[static_cast<std::size_t>(c.file)];
  const auto bytes = static_cast<std::uint64_t>(c.box.numel()) * dtype_size(t.dtype);
  if (c.begin < f.header_bytes || c.begin > c.end || c.end > f.bytes || c.end - c.begin != bytes)
    bad(path, where + ": bytes [" + std::to_string(c.begin) + ", " + std::to_string(c.end) +
                  ") of " + f.name + " (" + std::to_string(f.bytes) + " bytes) for " +
                  std::to_string(bytes) + " bytes of data");
  return c;
}

}  // namespace

void check_partition(const TensorEntry& t, const std::string& name, const std::string& path) {
  std::int64_t covered = 0;
  for (std::size_t i = 0; i < t.chunks.size(); ++i) {
    covered += t.chunks[i].box.numel();
    for (std::size_t j = 0; j < i; ++j) {
      if (intersect(t.chunks[i].box, t.chunks[j].box).numel() > 0)
        bad(path, "tensor " + name + ": chunks " + box_string(t.chunks[j].box) + " and " +
                      box_string(t.chunks[i].box) + " overlap");
    }
  }
  if (covered != shape_numel(t.shape))
    bad(path, "tensor " + name + ": its chunks hold " + std::to_string(covered) + " of its " +
                  std::to_string(shape_numel(t.shape)) + " elements (a shard is missing)");
}

namespace {

TensorEntry parse_tensor(const std::string& name, const json& j,
                         const std::vector<FileEntry>& files, const std::string& path) {
  const std::string where = "tensor " + name;
  TensorEntry t;
  const std::string dtype = field<std::string>(j, "dtype", where, path);
  const std::optional<DType> known = dtype_from_code(dtype);
  if (!known) bad(path, where + " has unknown dtype " + dtype);
  t.dtype = *known;
  t.shape = field<Shape>(j, "shape", where, path);
  for (std::int64_t d : t.shape) {
    if (d < 0 || d > (std::int64_t{1} << 40))
      bad(path, where + " has shape " + shape_string(t.shape));
  }
  if (!j.contains("chunks") || !j.at("chunks").is_array()) bad(path, where + " has no chunks");
  for (const json& c : j.at("chunks")) {
    t.chunks.push_back(
        parse_chunk(c, t, files, where + " chunk " + std::to_string(t.chunks.size()), path));
  }
  check_partition(t, name, path);
  return t;
}

// Of the manifest's text as written, without its "checksum" field (which comes last).
std::uint64_t own_checksum(const json& without) {
  const std::string text = without.dump(1);
  return checksum(text.data(), text.size());
}

// Parsing and dumping again gives the text that was written: the fields keep their order,
// and numbers and strings print as they did.
void check_own_checksum(json j, const std::string& path) {
  const std::uint64_t stated =
      parse_checksum(field<std::string>(j, "checksum", "the manifest", path), path);
  j.erase("checksum");
  if (own_checksum(j) != stated)
    bad(path, "its checksum does not match its text (changed or damaged after it was written)");
}

}  // namespace

Box intersect(const Box& a, const Box& b) {
  Box common{a.offsets, a.sizes};
  for (std::size_t d = 0; d < a.offsets.size(); ++d) {
    const std::int64_t begin = std::max(a.offsets[d], b.offsets[d]);
    const std::int64_t end = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    common.offsets[d] = begin;
    common.sizes[d] = std::max<std::int64_t>(0, end - begin);
  }
  if (common.numel() == 0) std::fill(common.sizes.begin(), common.sizes.end(), 0);
  return common;
}

std::string box_string(const Box& box) {
  std::string text = "[";
  for (std::size_t d = 0; d < box.offsets.size(); ++d) {
    if (d > 0) text += ", ";
    text += std::to_string(box.offsets[d]);
    text += ':';
    text += std::to_string(box.offsets[d] + box.sizes[d]);
  }
  return text + "]";
}

std::string to_json(const Manifest& m) {
  json files = json::array();
  for (const FileEntry& f : m.files) {
    files.push_back({{"name", f.name},
                     {"rank", f.rank},
                     {"bytes", f.bytes},
                     {"header_bytes", f.header_bytes},
                     {"header_checksum", checksum_text(f.header_checksum)}});
  }
  json tensors = json::object();
  for (const auto& [name, t] : m.tensors) {
    json chunks = json::array();
    for (const ChunkEntry& c : t.chunks) {
      json chunk = {{"offsets", c.box.offsets}, {"sizes", c.box.sizes}};
      chunk["file"] = c.file;
      chunk["data_offsets"] = {c.begin, c.end};
      chunk["checksum"] = checksum_text(c.checksum);
      chunks.push_back(std::move(chunk));
    }
    tensors[name] = {{"dtype", dtype_code(t.dtype)}, {"shape", t.shape}, {"chunks", chunks}};
  }
  json mesh = json::array();
  for (const auto& [name, size] : m.mesh) mesh.push_back({name, size});
  const json j = {{"format", kFormat},
                  {"version", kManifestVersion},
                  {"step", m.step},
                  {"optimizer_steps", m.optimizer_steps},
                  {"samples_drawn", m.samples_drawn},
                  {"seed", m.seed},
                  {"lr", m.lr},
                  {"world_size", m.world_size},
                  {"mesh", mesh},
                  {"files", files},
                  {"tensors", tensors},
                  {"config", m.config}};
  // The scalars (step, cursor, seed) and the config have no chunk checksum of their own: this
  // one covers the whole text before it.
  json with_checksum = j;
  with_checksum["checksum"] = checksum_text(own_checksum(j));
  return with_checksum.dump(1) + "\n";
}

Manifest parse_manifest(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(path, std::string("not JSON (") + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("format") || j.at("format") != kFormat)
    bad(path,
        std::string("not a weft distributed checkpoint (no \"format\": \"") + kFormat + "\")");
  Manifest m;
  m.version = field<int>(j, "version", "the manifest", path);
  if (m.version != kManifestVersion && m.version != 1)
    bad(path, "format version " + std::to_string(m.version) + "; this weft reads versions 1 and " +
                  std::to_string(kManifestVersion));
  if (m.version >= 2) check_own_checksum(j, path);
  m.step = field<std::int64_t>(j, "step", "the manifest", path);
  m.optimizer_steps = field<std::int64_t>(j, "optimizer_steps", "the manifest", path);
  m.samples_drawn = field<std::int64_t>(j, "samples_drawn", "the manifest", path);
  m.seed = field<std::int64_t>(j, "seed", "the manifest", path);
  m.lr = field<double>(j, "lr", "the manifest", path);
  m.world_size = field<int>(j, "world_size", "the manifest", path);
  m.config = field<std::string>(j, "config", "the manifest", path);
  if (m.step < 0 || m.optimizer_steps < 0 || m.optimizer_steps > m.step || m.samples_drawn < 0)
    bad(path, "step " + std::to_string(m.step) + ", optimizer_steps " +
                  std::to_string(m.optimizer_steps) + ", samples_drawn " +
                  std::to_string(m.samples_drawn) +
                  ": each must be at least 0, the optimizer's at most the step");
  int product = 1;
  for (const auto& dim :
       field<std::vector<std::pair<std::string, int>>>(j, "mesh", "the manifest", path)) {
    if (dim.second < 1)
      bad(path, "mesh dimension " + dim.first + " of size " + std::to_string(dim.second));
    product *= dim.second;
    m.mesh.push_back(dim);
  }
  if (m.world_size < 1 || product != m.world_size)
    bad(path, "a mesh of " + std::to_string(product) + " ranks in a world of " +
                  std::to_string(m.world_size));
  if (!j.contains("files") || !j.at("files").is_array()) bad(path, "no \"files\" list");
  for (const json& f : j.at("files")) m.files.push_back(parse_file(f, m.world_size, path));
  if (!j.contains("tensors") || !j.at("tensors").is_object()) bad(path, "no \"tensors\" object");
  for (const auto& [name, t] : j.at("tensors").items())
    m.tensors.emplace(name, parse_tensor(name, t, m.files, path));
  return m;
}

}  // namespace weft::checkpoint
