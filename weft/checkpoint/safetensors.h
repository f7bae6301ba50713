// The safetensors file format (Hugging Face's): an 8-byte little-endian header length N, N
// bytes of JSON ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
// "__metadata__": {string: string}}), then the tensors' raw little-endian bytes, back to back.
// PyTorch, JAX and numpy read it; weft's checkpoints are made of such files.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "weft/base/error.h"
#include "weft/tensor/tensor.h"

namespace weft::checkpoint {

// A checkpoint file that cannot be read: says which file and what is wrong with it.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

using Metadata = std::map<std::string, std::string>;

// safetensors' dtype codes ("F32", "BF16", ...); InvalidArgument for a dtype it lacks.
const char* dtype_code(DType dtype);
std::optional<DType> dtype_from_code(const std::string& code);

// The start of a file holding `tensors` (their data back to back after it, in this order):
// the 8-byte little-endian length and the JSON header, padded so that the data starts
// 8-byte aligned.
std::string safetensors_header(const std::vector<NamedTensor>& tensors, const Metadata& metadata);

// Writes `tensors` (in the given order) and `metadata` to `path` so that a crash at any
// moment leaves either the old file or the new one: the bytes go to a temporary file in the
// same directory, which is flushed to disk (fsync) and renamed over `path`, and the
// directory is synced. Throws SystemError (disk full, permissions) and removes the
// temporary file; the old `path` is untouched then.
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const Metadata& metadata = {});

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in file order
  Metadata metadata;
  const Tensor& at(const std::string& name) const;  // CheckpointError if absent
};

// Reads and checks a whole file: every length and offset is checked against the file's size
// before it is used, and a malformed header is a CheckpointError naming the file.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace weft::checkpoint
