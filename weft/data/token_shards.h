// Token files: a corpus tokenized once (weft-data tokenize) and read by training without
// being loaded: memory-mapped, any size.
//
// Format (llm.c's, which nanoGPT-style tools read): a header of 256 little-endian int32
// (magic 20240520, version 1 for uint16 tokens or 2 for uint32, the token count), then the
// tokens. Raw token files without a header (nanoGPT's train.bin) are read with the dtype
// the caller names. A folder of shards carries dataset.json: the tokenizer, the vocabulary
// size, and per split its files, tokens and the bytes of text they came from.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/data/documents.h"

namespace weft::data {

inline constexpr std::int32_t kShardMagic = 20240520;
inline constexpr std::size_t kShardHeaderBytes = 256 * sizeof(std::int32_t);

enum class TokenDtype { kUint16, kUint32 };
// uint16 when every id fits (vocabulary up to 65,536), else uint32.
TokenDtype token_dtype_for(std::int64_t vocab_size);

// Writes one shard: tokens appended, the header written on close() (to a temporary name,
// renamed into place, so that a crash never leaves a shard that looks whole).
class ShardWriter {
 public:
  ShardWriter(std::string path, TokenDtype dtype);
  ~ShardWriter();  // an unclosed shard is removed
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  // Throws DataError for an id the dtype cannot hold, SystemError for a failed write.
  void append(const std::int32_t* ids, std::size_t n);
  std::int64_t tokens() const { return tokens_; }
  void close();

 private:
  std::string path_, partial_;
  TokenDtype dtype_;
  int fd_ = -1;
  std::int64_t tokens_ = 0;
  std::vector<char> buffer_;
  void flush();
};

// One token file, memory-mapped read-only.
class TokenFile {
 public:
  // `raw_dtype` is used for a file without the header. Throws DataError naming the file: a
  // bad header, a size that does not match the header's count or is not a multiple of the
  // dtype's size.
  TokenFile(const std::string& path, TokenDtype raw_dtype);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  std::int64_t size() const { return tokens_; }
  TokenDtype dtype() const { return dtype_; }
  // Tokens [start, start + n) into `out`.
  void read(std::int64_t start, std::int64_t n, std::int32_t* out) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  TokenDtype dtype_;
  const unsigned char* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const unsigned char* tokens_at_ = nullptr;
  std::int64_t tokens_ = 0;
};

// A split's files as one stream of tokens.
class TokenStream {
 public:
  TokenStream(const std::vector<std::string>& files, TokenDtype raw_dtype);
  std::int64_t size() const { return total_; }
  // Tokens [start, start + n) of the concatenation (across files where a window crosses).
  // Throws DataError naming the file and offset of an id >= vocab_size.
  void read(std::int64_t start, std::int64_t n, std::int32_t* out, std::int64_t vocab_size) const;

 private:
  std::vector<std::unique_ptr<TokenFile>> files_;
  std::vector<std::int64_t> starts_;  // each file's first token in the stream
  std::int64_t total_ = 0;
};

}  // namespace weft::data
