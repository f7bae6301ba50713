// A file's bytes, decompressed as they are read (.gz through zlib, .zst through libzstd).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace weft::data::internal {

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Up to n bytes into `into`; 0 at the end. Throws DataError naming the file for a read
  // error or corrupt or truncated compressed data.
  virtual std::size_t read(char* into, std::size_t n) = 0;
  // Bytes of the file consumed so far (compressed bytes for a compressed file).
  virtual std::int64_t consumed() const = 0;
};

// By the name's ending: .gz, .zst, else the bytes as they are. Throws DataError.
std::unique_ptr<ByteStream> open_byte_stream(const std::string& path);

// Lines of a stream, without their '\n' (a final line without one included). A line longer
// than `max_line` bytes is a DataError naming `path` and the line: input without newlines
// (a binary file, a device) must not grow the process.
class LineReader {
 public:
  LineReader(std::unique_ptr<ByteStream> stream, std::string path, std::size_t max_line)
      : stream_(std::move(stream)), path_(std::move(path)), max_line_(max_line) {}
  bool next(std::string& line);
  std::int64_t line_number() const { return line_; }
  const ByteStream& stream() const { return *stream_; }

 private:
  std::unique_ptr<ByteStream> stream_;
  std::string path_;
  std::size_t max_line_;
  std::string buffer_;
  std::size_t at_ = 0;
  bool done_ = false;
  std::int64_t line_ = 0;
};

}  // namespace weft::data::internal
