// test::TempDir: a fresh directory under /tmp for one test, removed with everything in it
// when the object is destroyed.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include "weft/base/error.h"

namespace weft::test {

class TempDir {
 public:
  TempDir() {
    std::string name = "/tmp/weft-store-test-XXXXXX";
    if (::mkdtemp(name.data()) == nullptr) throw SystemError("mkdtemp", errno);
    path_ = name;
  }
  ~TempDir() {
    std::error_code ignored;  // a leftover directory under /tmp is no reason to fail a test
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace weft::test
