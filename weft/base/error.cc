#include "weft/base/error.h"

#include <cstring>
#include <utility>

namespace weft {

RemoteError::RemoteError(std::string type_name, std::string remote_what)
    : Error("task raised " + type_name + " in a worker process: " + remote_what),
      type_name_(std::move(type_name)),
      remote_what_(std::move(remote_what)) {}

SystemError::SystemError(const std::string& what_failed, int err)
    : Error(what_failed + ": " + std::strerror(err)), error_code_(err) {}

}  // namespace weft
