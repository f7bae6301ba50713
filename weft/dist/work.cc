#include "weft/dist/work.h"

#include <string>

#include "weft/dist/errors.h"

namespace weft::dist {

void Work::wait(Seconds timeout) const {
  if (!done_.wait_for(timeout)) {
    throw TimeoutError("Work::wait: the operation did not finish within " +
                       std::to_string(timeout.count()) +
                       " s (it keeps running until its own "
                       "timeout)");
  }
  done_.get();
}

std::exception_ptr Work::exception() const {
  if (!done_.done()) return nullptr;
  return done_.exception();
}

}  // namespace weft::dist
