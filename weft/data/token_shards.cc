#include "weft/data/token_shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "weft/base/unique_fd.h"

namespace weft::data {

// The format is little-endian; tokens are copied as this host stores them.
static_assert(std::endian::native == std::endian::little,
              "token shards assume a little-endian host");

namespace {

std::size_t dtype_bytes(TokenDtype d) { return d == TokenDtype::kUint16 ? 2 : 4; }

void write_all(int fd, const char* data, std::size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t wrote = ::write(fd, data, n);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      throw SystemError("writing " + path, errno);
    }
    data += wrote;
    n -= static_cast<std::size_t>(wrote);
  }
}

}  // namespace

TokenDtype token_dtype_for(std::int64_t vocab_size) {
  return vocab_size <= 65536 ? TokenDtype::kUint16 : TokenDtype::kUint32;
}

ShardWriter::ShardWriter(std::string path, TokenDtype dtype)
    : path_(std::move(path)), partial_(path_ + ".partial"), dtype_(dtype) {
  fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw SystemError("creating " + partial_, errno);
  const std::vector<char> header(kShardHeaderBytes, 0);  // written again on close()
  write_all(fd_, header.data(), header.size(), partial_);
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(partial_.c_str());
  }
}

void ShardWriter::append(const std::int32_t* ids, std::size_t n) {
  const std::int64_t limit = dtype_ == TokenDtype::kUint16 ? 65535 : INT32_MAX;
  const std::size_t width = dtype_ == TokenDtype::kUint16 ? 2 : 4;
  const std::size_t at = buffer_.size();
  buffer_.resize(at + n * width);
  char* out = buffer_.data() + at;
  for (std::size_t i = 0; i < n; ++i, out += width) {
    if (ids[i] < 0 || ids[i] > limit) {
      buffer_.resize(at);
      throw DataError(path_ + ": token id " + std::to_string(ids[i]) + " does not fit its " +
                      (dtype_ == TokenDtype::kUint16 ? "uint16" : "uint32") + " tokens");
    }
    const auto v = static_cast<std::uint32_t>(ids[i]);  // little-endian: the low bytes first
    std::memcpy(out, &v, width);
  }
  tokens_ += static_cast<std::int64_t>(n);
  if (buffer_.size() >= (4 << 20)) flush();
}

void ShardWriter::flush() {
  write_all(fd_, buffer_.data(), buffer_.size(), partial_);
  buffer_.clear();
}

void ShardWriter::close() {
  flush();
  std::int32_t header[256] = {};
  header[0] = kShardMagic;
  header[1] = dtype_ == TokenDtype::kUint16 ? 1 : 2;
  header[2] = static_cast<std::int32_t>(std::min<std::int64_t>(tokens_, INT32_MAX));
  if (tokens_ > INT32_MAX) {
    throw DataError(path_ + ": a shard holds at most 2^31 - 1 tokens (the header's count)");
  }
  if (::pwrite(fd_, header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header)) ||
      ::fsync(fd_) != 0) {
    throw SystemError("writing " + partial_, errno);
  }
  ::close(fd_);
  fd_ = -1;
  if (std::rename(partial_.c_str(), path_.c_str()) != 0) {
    throw SystemError("renaming " + partial_ + " to " + path_, errno);
  }
}

TokenFile::TokenFile(const std::string& path, TokenDtype raw_dtype)
    : path_(path), dtype_(raw_dtype) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw DataError("cannot open the token file " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw SystemError("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) throw DataError("the token file " + path + " is not a regular file");
  map_bytes_ = static_cast<std::size_t>(st.st_size);
  if (map_bytes_ > 0) {
    void* m = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (m == MAP_FAILED) throw SystemError("mmap " + path, errno);
    map_ = static_cast<const unsigned char*>(m);
  }
  std::int32_t header[3] = {};
  if (map_bytes_ >= kShardHeaderBytes) std::memcpy(header, map_, sizeof(header));
  std::size_t payload = map_bytes_;
  tokens_at_ = map_;
  if (header[0] == kShardMagic) {
    if (header[1] != 1 && header[1] != 2) {
      throw DataError(path + ": the header's version is " + std::to_string(header[1]) +
                      " (1: uint16 tokens, 2: uint32)");
    }
    dtype_ = header[1] == 1 ? TokenDtype::kUint16 : TokenDtype::kUint32;
    payload = map_bytes_ - kShardHeaderBytes;
    tokens_at_ = map_ + kShardHeaderBytes;
    if (header[2] < 0 || static_cast<std::size_t>(header[2]) * dtype_bytes(dtype_) != payload) {
      throw DataError(path + ": the header counts " + std::to_string(header[2]) + " tokens but " +
                      std::to_string(payload) + " bytes follow it (a truncated or damaged shard)");
    }
  }
  if (payload % dtype_bytes(dtype_) != 0) {
    throw DataError(path + ": " + std::to_string(payload) + " bytes is not a whole number of " +
                    (dtype_ == TokenDtype::kUint16 ? "uint16" : "uint32") + " tokens");
  }
  tokens_ = static_cast<std::int64_t>(payload / dtype_bytes(dtype_));
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
}

void TokenFile::read(std::int64_t start, std::int64_t n, std::int32_t* out) const {
  const auto at = static_cast<std::size_t>(start);
  if (dtype_ == TokenDtype::kUint16) {
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint16_t v;
      std::memcpy(&v, tokens_at_ + (at + static_cast<std::size_t>(i)) * 2, 2);
      out[i] = v;
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint32_t v;
      std::memcpy(&v, tokens_at_ + (at + static_cast<std::size_t>(i)) * 4, 4);
      out[i] = static_cast<std::int32_t>(v);
    }
  }
}

TokenStream::TokenStream(const std::vector<std::string>& files, TokenDtype raw_dtype) {
  for (const std::string& f : files) {
    files_.push_back(std::make_unique<TokenFile>(f, raw_dtype));
    starts_.push_back(total_);
    total_ += files_.back()->size();
  }
}

void TokenStream::read(std::int64_t start, std::int64_t n, std::int32_t* out,
                       std::int64_t vocab_size) const {
  auto it = std::upper_bound(starts_.begin(), starts_.end(), start);
  auto file = static_cast<std::size_t>(it - starts_.begin()) - 1;
  std::int64_t done = 0;
  while (done < n) {
    const TokenFile& f = *files_[file];
    const std::int64_t offset = start + done - starts_[file];
    const std::int64_t take = std::min(n - done, f.size() - offset);
    f.read(offset, take, out + done);
    for (std::int64_t i = 0; i < take; ++i) {
      if (out[done + i] >= vocab_size) {
        throw DataError(f.path() + ", token " + std::to_string(offset + i) + ": id " +
                        std::to_string(out[done + i]) + " is beyond the vocabulary (" +
                        std::to_string(vocab_size) + " tokens): the shards were made with " +
                        "another tokenizer, or model.vocab_size is too small");
      }
    }
    done += take;
    ++file;
  }
}

}  // namespace weft::data
