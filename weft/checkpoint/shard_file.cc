#include "weft/checkpoint/shard_file.h"

#include <filesystem>
#include <map>

#include "weft/checkpoint/checksum.h"
#include "weft/checkpoint/file_io.h"

namespace weft::checkpoint {
namespace {

[[noreturn]] void damaged(const std::string& path, const std::string& what) {
  throw CheckpointError("checkpoint file " + path + " is damaged: " + what +
                        "; resume from an earlier checkpoint");
}

// `region` (whole-tensor coordinates) of a tensor holding `box`.
Tensor part(Tensor t, const Box& box, const Box& region) {
  for (std::size_t d = 0; d < box.offsets.size(); ++d) {
    t = t.narrow(static_cast<int>(d), region.offsets[d] - box.offsets[d], region.sizes[d]);
  }
  return t;
}

// An open file of the checkpoint, its size and header checked against the manifest.
class OpenFile {
 public:
  OpenFile(const std::string& dir, const FileEntry& entry)
      : path_((std::filesystem::path(dir) / entry.name).string()) {
    try {
      fd_ = open_for_reading(path_);
    } catch (const SystemError& e) {
      throw CheckpointError(std::string("checkpoint shard missing or unreadable: ") + e.what() +
                            "; resume from an earlier checkpoint");
    }
    const std::uint64_t size = file_size(fd_.get(), path_);
    if (size != entry.bytes) {
      damaged(path_, std::to_string(size) + " bytes where the manifest says " +
                         std::to_string(entry.bytes) + (size < entry.bytes ? " (cut short)" : ""));
    }
    std::string header(static_cast<std::size_t>(entry.header_bytes), '\0');
    read_at(fd_.get(), header.data(), header.size(), 0, path_);
    if (checksum(header.data(), header.size()) != entry.header_checksum)
      damaged(path_, "its safetensors header does not match its checksum");
  }
  // The chunk's bytes into `out` (contiguous, of the chunk's size), verified.
  void read_chunk(const ChunkEntry& c, const std::string& tensor, Tensor& out) const {
    read_at(fd_.get(), out.bytes(), out.nbytes(), c.begin, path_);
    if (checksum(out.bytes(), out.nbytes()) != c.checksum) {
      damaged(path_, "bytes [" + std::to_string(c.begin) + ", " + std::to_string(c.end) + ") of " +
                         tensor + " " + box_string(c.box) + " do not match their checksum");
    }
  }

 private:
  std::string path_;
  UniqueFd fd_;
};

}  // namespace

WrittenFile write_shard_file(const std::string& path, const std::vector<PieceData>& pieces,
                             const Metadata& metadata) {
  std::vector<NamedTensor> named;
  Metadata meta = metadata;
  for (const PieceData& p : pieces) {
    named.push_back({p.tensor, p.data});
    meta["slice." + p.tensor] = box_string(p.box);
  }
  const std::string header = safetensors_header(named, meta);
  WrittenFile file;
  file.header_bytes = header.size();
  file.header_checksum = checksum(header.data(), header.size());
  UniqueFd fd = create_file(path);
  write_all(fd.get(), header.data(), header.size(), path);
  std::uint64_t at = header.size();
  for (const PieceData& p : pieces) {
    const std::size_t n = p.data.nbytes();
    if (n > 0) write_all(fd.get(), p.data.bytes(), n, path);
    file.chunks.push_back({p.box, 0, at, at + n, checksum(n > 0 ? p.data.bytes() : nullptr, n)});
    at += n;
  }
  sync_and_close(fd, path);
  file.bytes = at;
  return file;
}

std::uint64_t execute_reads(const std::string& dir, const Manifest& manifest,
                            const std::vector<Target>& targets, const std::vector<Read>& reads,
                            std::vector<Tensor>& into) {
  std::map<int, OpenFile> files;
  std::uint64_t bytes = 0;
  for (const Read& r : reads) {
    const std::string& name = targets[r.target].tensor;
    const TensorEntry& tensor = manifest.tensors.at(name);
    const ChunkEntry& chunk = tensor.chunks[r.chunk];
    auto it = files.find(chunk.file);
    if (it == files.end()) {
      it = files.try_emplace(chunk.file, dir, manifest.files[static_cast<std::size_t>(chunk.file)])
               .first;
    }
    Tensor& target = into[r.target];
    bytes += chunk.end - chunk.begin;
    if (chunk.box == targets[r.target].box) {  // the same layout: straight into place
      it->second.read_chunk(chunk, name, target);
      continue;
    }
    Tensor whole = Tensor::zeros(chunk.box.sizes, tensor.dtype);
    it->second.read_chunk(chunk, name, whole);
    part(target, targets[r.target].box, r.region).copy_from(part(whole, chunk.box, r.region));
  }
  return bytes;
}

std::uint64_t verify_checkpoint(const std::string& dir, const Manifest& manifest) {
  std::uint64_t bytes = 0;
  for (std::size_t f = 0; f < manifest.files.size(); ++f) {
    const OpenFile file(dir, manifest.files[f]);
    bytes += manifest.files[f].header_bytes;
    for (const auto& [name, tensor] : manifest.tensors) {
      for (const ChunkEntry& c : tensor.chunks) {
        if (c.file != static_cast<int>(f)) continue;
        Tensor data = Tensor::zeros(c.box.sizes, tensor.dtype);
        file.read_chunk(c, name, data);
        bytes += c.end - c.begin;
      }
    }
  }
  return bytes;
}

}  // namespace weft::checkpoint
