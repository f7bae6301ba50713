// dist::run_threads: the thread backend's entry point. Runs `fn` on `world_size` ranks, each
// a thread of this process with its own ProcessGroup over a shared in-memory transport.
#pragma once

#include <functional>

#include "weft/dist/process_group.h"

namespace weft::dist {

// Blocks until every rank's `fn` returned. If any rank throws, the transport is aborted (so
// ranks blocked in collectives fail at once with PeerError instead of waiting for their
// timeout) and the first exception thrown, by time, is rethrown here with its type.
void run_threads(int world_size, const std::function<void(ProcessGroup&)>& fn,
                 GroupOptions options = {});

}  // namespace weft::dist
