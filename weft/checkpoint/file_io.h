// The file-system calls checkpoints make, each failure a SystemError naming the operation and
// the path. Writes are made durable the POSIX way: fsync the file, check close, rename, fsync
// the directory that holds the new name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "weft/base/unique_fd.h"

namespace weft::checkpoint {

UniqueFd create_file(const std::string& path);  // new, write-only; EEXIST is an error
UniqueFd open_for_reading(const std::string& path);
void write_all(int fd, const void* data, std::size_t bytes, const std::string& path);
// Exactly `bytes` from `offset`; CheckpointError ("cut short") when the file ends first.
void read_at(int fd, void* data, std::size_t bytes, std::uint64_t offset, const std::string& path);
std::uint64_t file_size(int fd, const std::string& path);
// fsync, then close, checking both (NFS reports lost writes at close).
void sync_and_close(UniqueFd& fd, const std::string& path);
void sync_directory(const std::string& dir);
// rename(2), then sync the directory holding `to`.
void rename_durably(const std::string& from, const std::string& to);
std::string read_text_file(const std::string& path, std::size_t max_bytes);  // CheckpointError
void write_text_file(const std::string& path, const std::string& text);      // created, synced
void make_directories(const std::string& path);                              // mkdir -p
void remove_tree(const std::string& path);  // rm -rf; absent is fine

// For tests: called before every call above that changes the file system (create, write,
// fsync, close, rename, mkdir, remove) with its name and path. It may throw (a full disk, a
// failed fsync) or end the process (a crash at that instant). Empty: none. Set it while no
// checkpoint is being written.
using FileSystemHook = std::function<void(const char* call, const std::string& path)>;
void set_file_system_hook(FileSystemHook hook);

}  // namespace weft::checkpoint
