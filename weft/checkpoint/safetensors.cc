#include "weft/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "weft/base/unique_fd.h"
#include "weft/checkpoint/file_io.h"

namespace weft::checkpoint {
namespace {

using json = nlohmann::json;

constexpr std::uint64_t kMaxHeader = std::uint64_t{100} << 20;  // as the reference reader

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {{DType::kFloat32, "F32"}, {DType::kFloat64, "F64"},
                                 {DType::kFloat16, "F16"}, {DType::kBFloat16, "BF16"},
                                 {DType::kInt8, "I8"},     {DType::kUInt8, "U8"},
                                 {DType::kInt32, "I32"},   {DType::kInt64, "I64"}};

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw CheckpointError("checkpoint file " + path + " is damaged or not a safetensors file: " +
                        what + "; restore it or resume from an earlier checkpoint");
}

std::string temporary_name(const std::string& path) {
  std::random_device rd;
  return path + ".tmp-" + std::to_string(rd()) + std::to_string(::getpid());
}

}  // namespace

const char* dtype_code(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  throw InvalidArgument("safetensors: unsupported dtype " + std::string(dtype_name(dtype)));
}

std::optional<DType> dtype_from_code(const std::string& code) {
  for (const auto& d : kDTypes) {
    if (code == d.name) return d.dtype;
  }
  return std::nullopt;
}

std::string safetensors_header(const std::vector<NamedTensor>& tensors, const Metadata& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const std::uint64_t bytes = tensor.nbytes();
    header[name] = {{"dtype", dtype_code(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>(text.size() >> (8 * i));
  return out + text;
}

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const Metadata& metadata) {
  const std::string header = safetensors_header(tensors, metadata);
  const std::string tmp = temporary_name(path);
  UniqueFd fd = create_file(tmp);
  try {
    write_all(fd.get(), header.data(), header.size(), tmp);
    for (const auto& [name, tensor] : tensors) {
      const Tensor c = tensor.contiguous();
      if (c.nbytes() > 0) write_all(fd.get(), c.bytes(), c.nbytes(), tmp);
    }
    sync_and_close(fd, tmp);
    rename_durably(tmp, path);
  } catch (...) {
    fd.reset();
    ::unlink(tmp.c_str());
    throw;
  }
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return t.tensor;
  }
  throw CheckpointError("checkpoint has no tensor named '" + name + "'");
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw CheckpointError("cannot open checkpoint file " + path + ": " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  if (size < 8) bad_file(path, "shorter than the 8-byte header length");
  unsigned char length[8];
  in.read(reinterpret_cast<char*>(length), 8);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(length[i]) << (8 * i);
  if (n > kMaxHeader || n > size - 8) {
    bad_file(path, "header length " + std::to_string(n) + " exceeds the file (" +
                       std::to_string(size) + " bytes) or the 100 MiB limit");
  }
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    bad_file(path, std::string("header is not JSON (") + e.what() + ")");
  }
  if (!header.is_object()) bad_file(path, "header is not a JSON object");
  const std::uint64_t data_size = size - 8 - n;
  SafetensorsFile file;
  struct Entry {
    std::uint64_t begin, end;
    std::string name;
    DType dtype;
    Shape shape;
  };
  std::vector<Entry> entries;
  try {
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        file.metadata = value.get<Metadata>();
        continue;
      }
      Entry e{value.at("data_offsets").at(0).get<std::uint64_t>(),
              value.at("data_offsets").at(1).get<std::uint64_t>(), name, DType::kFloat32,
              value.at("shape").get<Shape>()};
      const std::string dtype = value.at("dtype").get<std::string>();
      const auto* known = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                                       [&](const DTypeName& d) { return dtype == d.name; });
      if (known == std::end(kDTypes))
        bad_file(path, "tensor " + name + " has unknown dtype " + dtype);
      e.dtype = known->dtype;
      std::uint64_t bytes = dtype_size(e.dtype);  // the product, checked for overflow
      for (std::int64_t d : e.shape) {
        if (d < 0 || __builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes)) {
          bad_file(path, "tensor " + name + " has a bad shape " + shape_string(e.shape));
        }
      }
      if (e.begin > e.end || e.end > data_size || e.end - e.begin != bytes) {
        bad_file(path, "tensor " + name + " claims bytes [" + std::to_string(e.begin) + ", " +
                           std::to_string(e.end) + ") of " + std::to_string(data_size) +
                           " for shape " + shape_string(e.shape));
      }
      entries.push_back(std::move(e));
    }
  } catch (const json::exception& e) {
    bad_file(path, std::string("header entry malformed (") + e.what() + ")");
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  std::uint64_t expected = 0;
  for (const Entry& e : entries) {
    if (e.begin != expected) bad_file(path, "tensor data overlaps or leaves gaps at " + e.name);
    expected = e.end;
    Tensor t = Tensor::zeros(e.shape, e.dtype);
    in.seekg(static_cast<std::streamoff>(8 + n + e.begin));
    in.read(reinterpret_cast<char*>(t.bytes()), static_cast<std::streamsize>(e.end - e.begin));
    if (!in) bad_file(path, "tensor " + e.name + " is cut short");
    file.tensors.push_back({e.name, std::move(t)});
  }
  if (expected != data_size) {
    bad_file(path, std::to_string(data_size - expected) + " bytes after the last tensor");
  }
  return file;
}

}  // namespace weft::checkpoint
