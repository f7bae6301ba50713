// The rendezvous server weftrun hosts on node 0: the job's TCPStore, which the workers'
// init_process_group joins (with WEFT_STORE_HOSTED=1, so no rank starts its own).
#pragma once

#include <memory>
#include <string>

#include "weft/launch/rendezvous.h"

namespace weft::tools {

// Serves a TCPStore on bind_host:port (port 0: any free port) that only clients presenting
// `token` may use. Throws weft::Error naming the address when it cannot listen there.
std::unique_ptr<launch::RendezvousHost> start_store_rendezvous(const std::string& bind_host,
                                                               int port, const std::string& token);

}  // namespace weft::tools
