// ScopedEnv: sets (or, given nullptr, unsets) an environment variable for a scope and
// restores what was there. Not thread-safe, as setenv is not: for tests that run no threads
// meanwhile.
#pragma once

#include <stdlib.h>

#include <optional>
#include <string>

namespace weft::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace weft::test
