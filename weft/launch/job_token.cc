#include "weft/launch/job_token.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

#include "weft/base/error.h"
#include "weft/base/unique_fd.h"

namespace weft::launch {
namespace {

constexpr std::size_t kTokenBytes = 16;  // 128 bits: not guessable within a job's life

bool read_urandom(unsigned char* data, std::size_t size) {
  const UniqueFd fd(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd.get(), data + done, size - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  return done == size;
}

}  // namespace

std::string random_job_token() {
  unsigned char bytes[kTokenBytes];
  // GRND_NONBLOCK: early in boot the pool may not be ready, and the launcher must not wait
  // for it; /dev/urandom never blocks.
  ssize_t n;
  do {
    n = ::getrandom(bytes, sizeof(bytes), GRND_NONBLOCK);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof(bytes)) && !read_urandom(bytes, sizeof(bytes))) {
    throw SystemError(
        "job token: neither getrandom nor /dev/urandom gave 16 random bytes; "
        "pass --token or set WEFT_JOB_TOKEN",
        errno);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 0xf];
  }
  return token;
}

std::string resolve_job_token(const std::optional<std::string>& flag, const char* env_value,
                              int nnodes) {
  if (flag) {
    if (flag->empty()) {
      throw InvalidArgument(
          "--token is empty: give the job's shared secret, or leave --token "
          "out on a single node to have one made up");
    }
    return *flag;
  }
  if (env_value != nullptr && *env_value != '\0') return env_value;
  if (nnodes > 1) {
    throw InvalidArgument(
        "a multi-node job needs a job token that every node shares: pass the same --token T "
        "(or set WEFT_JOB_TOKEN) on every node, e.g. T=$(openssl rand -hex 16)");
  }
  return random_job_token();
}

}  // namespace weft::launch
