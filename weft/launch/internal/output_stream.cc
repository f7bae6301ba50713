#include "weft/launch/internal/output_stream.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace weft::launch::internal {

void OutputStream::write(std::string_view text) {
  while (!text.empty() && !broken_) {
    const ssize_t n = ::write(fd_, text.data(), text.size());
    if (n > 0) {
      text.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Someone made the stream non-blocking: wait for room rather than spin.
      pollfd p{fd_, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else {
      broken_ = true;
    }
  }
}

void OutputStream::log(std::string_view message) {
  std::string line = "weftrun: ";
  line += message;
  line += '\n';
  write(line);
}

}  // namespace weft::launch::internal
