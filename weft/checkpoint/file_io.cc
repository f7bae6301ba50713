#include "weft/checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

#include "weft/checkpoint/safetensors.h"

namespace weft::checkpoint {
namespace {

FileSystemHook& hook() {
  static FileSystemHook h;
  return h;
}

void before(const char* call, const std::string& path) {
  if (hook()) hook()(call, path);
}

}  // namespace

void set_file_system_hook(FileSystemHook h) { hook() = std::move(h); }

UniqueFd create_file(const std::string& path) {
  before("create", path);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) throw SystemError("create " + path, errno);
  return fd;
}

UniqueFd open_for_reading(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw SystemError("open " + path, errno);
  return fd;
}

void write_all(int fd, const void* data, std::size_t bytes, const std::string& path) {
  before("write", path);
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t w = ::write(fd, p, bytes);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw SystemError("write " + path, errno);
    p += w;
    bytes -= static_cast<std::size_t>(w);
  }
}

void read_at(int fd, void* data, std::size_t bytes, std::uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t r = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw SystemError("read " + path, errno);
    if (r == 0) {
      throw CheckpointError("checkpoint file " + path + " is cut short at byte " +
                            std::to_string(offset) + "; resume from an earlier checkpoint");
    }
    p += r;
    offset += static_cast<std::uint64_t>(r);
    bytes -= static_cast<std::size_t>(r);
  }
}

std::uint64_t file_size(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw SystemError("stat " + path, errno);
  return static_cast<std::uint64_t>(st.st_size);
}

void sync_and_close(UniqueFd& fd, const std::string& path) {
  before("fsync", path);
  if (::fsync(fd.get()) != 0) throw SystemError("fsync " + path, errno);
  before("close", path);
  if (const int err = fd.close(); err != 0) throw SystemError("close " + path, err);
}

void sync_directory(const std::string& dir) {
  before("fsync directory", dir);
  const UniqueFd fd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) throw SystemError("open directory " + dir + " to sync it", errno);
  if (::fsync(fd.get()) != 0) throw SystemError("fsync directory " + dir, errno);
}

void rename_durably(const std::string& from, const std::string& to) {
  before("rename", from);
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw SystemError("rename " + from + " to " + to, errno);
  sync_directory(std::filesystem::path(to).parent_path().string());
}

std::string read_text_file(const std::string& path, std::size_t max_bytes) {
  const UniqueFd fd = open_for_reading(path);
  const std::uint64_t size = file_size(fd.get(), path);
  if (size > max_bytes) {
    throw CheckpointError(path + " is " + std::to_string(size) + " bytes, over the " +
                          std::to_string(max_bytes) + " this file may have");
  }
  std::string text(static_cast<std::size_t>(size), '\0');
  read_at(fd.get(), text.data(), text.size(), 0, path);
  return text;
}

void write_text_file(const std::string& path, const std::string& text) {
  UniqueFd fd = create_file(path);
  write_all(fd.get(), text.data(), text.size(), path);
  sync_and_close(fd, path);
}

void make_directories(const std::string& path) {
  before("mkdir", path);
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw SystemError("create directory " + path, ec.value());
}

void remove_tree(const std::string& path) {
  before("remove", path);
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) throw SystemError("remove " + path, ec.value());
}

}  // namespace weft::checkpoint
