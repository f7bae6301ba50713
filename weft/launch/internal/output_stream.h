// One of weftrun's own output streams (fd 1 or 2). The launcher is its only writer and
// writes whole buffers of whole lines, so lines never interleave.
#pragma once

#include <string_view>

namespace weft::launch::internal {

class OutputStream {
 public:
  explicit OutputStream(int fd) : fd_(fd) {}

  // Writes all of `text`, blocking while the reader is slow (the back-pressure reaches the
  // workers through their pipes). Once the stream is gone (EPIPE: the reader closed it;
  // EBADF: it was never open) later text is dropped and the job goes on: its exit code
  // still tells the outcome.
  void write(std::string_view text);
  // write("weftrun: " + message + "\n").
  void log(std::string_view message);

 private:
  int fd_;
  bool broken_ = false;
};

}  // namespace weft::launch::internal
