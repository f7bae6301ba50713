#include "weft/checkpoint/deep_verify.h"

#include <cmath>
#include <filesystem>
#include <iterator>
#include <map>

#include "weft/checkpoint/checksum.h"
#include "weft/checkpoint/safetensors.h"

namespace weft::checkpoint {
namespace {

[[noreturn]] void wrong(const std::string& what) {
  throw CheckpointError("checkpoint does not hold what its manifest says: " + what +
                        "; resume from an earlier checkpoint");
}

template <class T>
std::int64_t non_finite(const Tensor& t) {
  std::int64_t n = 0;
  const T* v = t.data<T>();
  for (std::int64_t i = 0; i < t.numel(); ++i) n += std::isfinite(static_cast<float>(v[i])) ? 0 : 1;
  return n;
}

void check_values(const std::string& where, const Tensor& t) {
  std::int64_t bad = 0;
  if (t.dtype() == DType::kFloat32) bad = non_finite<float>(t);
  if (t.dtype() == DType::kBFloat16) bad = non_finite<BFloat16>(t);
  if (bad > 0) wrong(where + " holds " + std::to_string(bad) + " NaN or infinite values");
}

struct Expected {
  const std::string* tensor;
  const TensorEntry* entry;
  const ChunkEntry* chunk;
};

// File f against the manifest's chunks in it, by the byte where each starts (an empty chunk
// starts where the next one does).
void check_file(const std::string& dir, const Manifest& m, std::size_t f, DeepVerification& out) {
  const FileEntry& entry = m.files[f];
  const std::string path = (std::filesystem::path(dir) / entry.name).string();
  std::multimap<std::uint64_t, Expected> expected;
  for (const auto& [name, t] : m.tensors)
    for (const ChunkEntry& c : t.chunks)
      if (c.file == static_cast<int>(f)) expected.insert({c.begin, {&name, &t, &c}});
  const SafetensorsFile file = load_safetensors(path);
  std::uint64_t at = entry.header_bytes;  // the tensors are back to back after the header
  for (const NamedTensor& nt : file.tensors) {
    const std::string where = path + ": " + nt.name + " at byte " + std::to_string(at);
    auto [it, end] = expected.equal_range(at);
    if (it == end) wrong(where + " is no chunk of the manifest");
    while (std::next(it) != end && *it->second.tensor != nt.name) ++it;
    const Expected& e = it->second;
    const std::string chunk = *e.tensor + " " + box_string(e.chunk->box);
    if (nt.name != *e.tensor) wrong(where + " is where the manifest puts " + chunk);
    if (nt.tensor.dtype() != e.entry->dtype || nt.tensor.shape() != e.chunk->box.sizes) {
      wrong(where + " is " + std::string(dtype_name(nt.tensor.dtype())) + " " +
            shape_string(nt.tensor.shape()) + ", not the manifest's " +
            std::string(dtype_name(e.entry->dtype)) + " " + chunk);
    }
    const auto slice = file.metadata.find("slice." + nt.name);
    if (slice == file.metadata.end() || slice->second != box_string(e.chunk->box)) {
      wrong(where + " is the slice " + (slice == file.metadata.end() ? "(none)" : slice->second) +
            " by its file, " + box_string(e.chunk->box) + " by the manifest");
    }
    const std::uint64_t n = nt.tensor.nbytes();
    if (e.chunk->end - e.chunk->begin != n ||
        checksum(n > 0 ? nt.tensor.bytes() : nullptr, n) != e.chunk->checksum) {
      wrong(where + ": its bytes do not match the checksum of " + chunk);
    }
    check_values(where, nt.tensor);
    expected.erase(it);
    at += n;
    ++out.chunks;
  }
  if (!expected.empty()) {
    const Expected& e = expected.begin()->second;
    wrong(path + " lacks " + *e.tensor + " " + box_string(e.chunk->box) + ", which the manifest " +
          "puts at byte " + std::to_string(e.chunk->begin));
  }
  out.bytes += entry.bytes;
  ++out.files;
}

}  // namespace

DeepVerification deep_verify_checkpoint(const std::string& dir, const Manifest& manifest) {
  DeepVerification out;
  const std::string manifest_path = (std::filesystem::path(dir) / kManifestName).string();
  for (const auto& [name, t] : manifest.tensors) check_partition(t, name, manifest_path);
  out.tensors = static_cast<std::int64_t>(manifest.tensors.size());
  for (std::size_t f = 0; f < manifest.files.size(); ++f) check_file(dir, manifest, f, out);
  return out;
}

}  // namespace weft::checkpoint
