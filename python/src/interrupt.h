// Ctrl-C during a blocking collective. A collective runs with the GIL released, so Python
// cannot raise KeyboardInterrupt until it returns, which may be minutes away (the op's
// timeout). Instead: a SIGINT handler, chained in front of Python's own, wakes a watcher
// thread, which aborts the group whose call is blocked; the call then fails at once (its
// peers with PeerError naming this rank), and the bindings raise KeyboardInterrupt.
//
//   {
//     py::gil_scoped_release release;
//     BlockingCall call(group);          // registers `group` as interruptible, until the
//     group->all_reduce(...);            // call returns, or throws once interrupted
//   }
//   raise_if_interrupted();              // GIL held: KeyboardInterrupt if SIGINT came
//
// The handler is installed by arm_interrupts() (init_process_group calls it), in front of
// the Python handler that handles SIGINT then (not over SIG_IGN or SIG_DFL: those already do
// what the program chose); a handler set later with signal.signal() replaces it, and Ctrl-C
// then waits for the call to end (its timeout at most). A forked child's SIGINT is its own.
#pragma once

#include "weft/dist/process_group.h"

namespace weft::python {

void arm_interrupts();

class BlockingCall {
 public:
  explicit BlockingCall(dist::ProcessGroup* group);
  ~BlockingCall();
  BlockingCall(const BlockingCall&) = delete;
  BlockingCall& operator=(const BlockingCall&) = delete;

 private:
  dist::ProcessGroup* group_;
};

// With the GIL: runs Python's pending signal handlers (KeyboardInterrupt for SIGINT) and
// throws pybind11::error_already_set if one raised.
void raise_if_interrupted();

}  // namespace weft::python
