// test::TempDir: a fresh, private directory for one test (under $TMPDIR, else /tmp), removed
// with everything in it when the object is destroyed. Not thread-safe; a forked child must
// not destroy its copy (it ends in _exit, as tests/support's harnesses do).
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include "weft/base/error.h"

namespace weft::test {

class TempDir {
 public:
  // Creates <temp>/<prefix>-XXXXXX (mkdtemp: mode 0700, a name no other test can take).
  // Throws weft::SystemError if it cannot.
  explicit TempDir(const std::string& prefix = "weft-test") {
    std::string name = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(name.data()) == nullptr) throw SystemError("mkdtemp " + name, errno);
    path_ = name;
  }
  ~TempDir() {
    std::error_code ignored;  // a leftover temporary directory is no reason to fail a test
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside the directory (nothing is created).
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace weft::test
