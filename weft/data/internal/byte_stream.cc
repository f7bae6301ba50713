#include "weft/data/internal/byte_stream.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "weft/base/unique_fd.h"
#include "weft/data/documents.h"

namespace weft::data::internal {

namespace {

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

[[noreturn]] void read_failed(const std::string& path) {
  throw DataError("reading " + path + " failed: " + std::strerror(errno));
}

class FileStream final : public ByteStream {
 public:
  explicit FileStream(const std::string& path)
      : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (!fd_) throw DataError("cannot open " + path + ": " + std::strerror(errno));
  }
  std::size_t read(char* into, std::size_t n) override {
    for (;;) {
      const ssize_t got = ::read(fd_.get(), into, n);
      if (got >= 0) {
        consumed_ += got;
        return static_cast<std::size_t>(got);
      }
      if (errno != EINTR) read_failed(path_);
    }
  }
  std::int64_t consumed() const override { return consumed_; }
  int fd() const { return fd_.get(); }

 private:
  std::string path_;
  UniqueFd fd_;
  std::int64_t consumed_ = 0;
};

class GzipStream final : public ByteStream {
 public:
  explicit GzipStream(const std::string& path) : path_(path), gz_(gzopen(path.c_str(), "rb")) {
    if (gz_ == nullptr) throw DataError("cannot open " + path + ": " + std::strerror(errno));
    gzbuffer(gz_, 1 << 17);
  }
  ~GzipStream() override { gzclose(gz_); }
  std::size_t read(char* into, std::size_t n) override {
    const int got = gzread(gz_, into, static_cast<unsigned>(std::min<std::size_t>(n, 1 << 30)));
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(gz_, &code);
      throw DataError(path_ + ": corrupt gzip data near byte " + std::to_string(consumed()) +
                      " of the file (" + message + ")");
    }
    if (got == 0 && !gzeof(gz_)) read_failed(path_);
    return static_cast<std::size_t>(got);
  }
  std::int64_t consumed() const override { return gzoffset(gz_); }

 private:
  std::string path_;
  gzFile gz_;
};

class ZstdStream final : public ByteStream {
 public:
  explicit ZstdStream(const std::string& path)
      : file_(path), path_(path), dctx_(ZSTD_createDCtx()), in_(ZSTD_DStreamInSize()) {}
  ~ZstdStream() override { ZSTD_freeDCtx(dctx_); }
  std::size_t read(char* into, std::size_t n) override {
    ZSTD_outBuffer out{into, n, 0};
    while (out.pos == 0) {
      if (input_.pos == input_.size) {
        const std::size_t got = file_.read(in_.data(), in_.size());
        if (got == 0) {
          if (frame_open_) {
            throw DataError(path_ + ": the zstd data ends in the middle of a frame (truncated?)");
          }
          return 0;
        }
        input_ = ZSTD_inBuffer{in_.data(), got, 0};
      }
      const std::size_t left = ZSTD_decompressStream(dctx_, &out, &input_);
      if (ZSTD_isError(left)) {
        throw DataError(path_ + ": corrupt zstd data near byte " +
                        std::to_string(file_.consumed()) + " of the file (" +
                        ZSTD_getErrorName(left) + ")");
      }
      frame_open_ = left != 0;
    }
    return out.pos;
  }
  std::int64_t consumed() const override { return file_.consumed(); }

 private:
  FileStream file_;
  std::string path_;
  ZSTD_DCtx* dctx_;
  std::vector<char> in_;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  bool frame_open_ = false;
};

}  // namespace

std::unique_ptr<ByteStream> open_byte_stream(const std::string& path) {
  if (ends_with(path, ".gz")) return std::make_unique<GzipStream>(path);
  if (ends_with(path, ".zst")) return std::make_unique<ZstdStream>(path);
  return std::make_unique<FileStream>(path);
}

bool LineReader::next(std::string& line) {
  for (;;) {
    const std::size_t newline = buffer_.find('\n', at_);
    if (newline != std::string::npos) {
      line.assign(buffer_, at_, newline - at_);
      at_ = newline + 1;
      ++line_;
      return true;
    }
    if (done_) {
      if (at_ == buffer_.size()) return false;
      line.assign(buffer_, at_);
      at_ = buffer_.size();
      ++line_;
      return true;
    }
    buffer_.erase(0, at_);
    at_ = 0;
    if (buffer_.size() > max_line_) {
      throw DataError(path_ + ": line " + std::to_string(line_ + 1) + " is longer than " +
                      std::to_string(max_line_ >> 20) + " MiB");
    }
    const std::size_t had = buffer_.size();
    buffer_.resize(had + (1 << 16));
    const std::size_t got = stream_->read(buffer_.data() + had, 1 << 16);
    buffer_.resize(had + got);
    done_ = got == 0;
  }
}

}  // namespace weft::data::internal
