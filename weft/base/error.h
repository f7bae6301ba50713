// The error model: every error weft throws derives from weft::Error, and the class says
// what the caller should do about it. Messages say what happened and what to do next.
//
//   weft::Error                        root; catch this to catch everything weft throws
//   ├─ InvalidArgument                 fix the call: a bad value, size or option
//   ├─ TimeoutError                    the deadline passed; retry or give it more time
//   ├─ CancelledError                  the work was cancelled before it ran
//   ├─ ExecutorShutdown                submit() after shutdown(); make a new executor
//   ├─ BrokenExecutor                  the executor cannot run work; make a new one
//   │  └─ BrokenProcessPool            a worker process died while running the task
//   ├─ RemoteError                     the task threw in another process (type + what())
//   └─ SystemError                     an OS call failed (carries errno)
#pragma once

#include <stdexcept>
#include <string>

namespace weft {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InvalidArgument : public Error {
 public:
  using Error::Error;
};

class TimeoutError : public Error {
 public:
  using Error::Error;
};

class CancelledError : public Error {
 public:
  using Error::Error;
};

class ExecutorShutdown : public Error {
 public:
  using Error::Error;
};

class BrokenExecutor : public Error {
 public:
  using Error::Error;
};

class BrokenProcessPool : public BrokenExecutor {
 public:
  using BrokenExecutor::BrokenExecutor;
};

// A task that ran in another process threw. The original exception object cannot
// cross the process boundary, so its dynamic type name and what() are carried instead.
class RemoteError : public Error {
 public:
  RemoteError(std::string type_name, std::string remote_what);
  const std::string& type_name() const noexcept { return type_name_; }
  const std::string& remote_what() const noexcept { return remote_what_; }

 private:
  std::string type_name_;
  std::string remote_what_;
};

// An operating-system call failed. what() names the call, the object and strerror(errno).
class SystemError : public Error {
 public:
  SystemError(const std::string& what_failed, int err);
  int error_code() const noexcept { return error_code_; }

 private:
  int error_code_;
};

}  // namespace weft
