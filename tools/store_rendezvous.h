// The rendezvous server weftrun hosts on node 0: the job's TCPStore, which the workers'
// init_process_group joins (with WEFT_STORE_HOSTED=1, so no rank starts its own), and where
// each node's weftrun records its workers' deaths (weft/store/death_log.h).
#pragma once

#include <memory>
#include <string>

#include "weft/launch/rendezvous.h"

namespace weft::tools {

// Serves a TCPStore on bind_host:port (port 0: any free port) that only clients presenting
// `token` may use. Throws weft::Error naming the address when it cannot listen there.
std::unique_ptr<launch::RendezvousHost> start_store_rendezvous(const std::string& bind_host,
                                                               int port, const std::string& token);

// A client of node 0's store at host:port, for another node's weftrun to record deaths with
// (each within a few seconds, or weft::Error).
std::unique_ptr<launch::DeathRecorder> connect_store_recorder(const std::string& host, int port,
                                                              const std::string& token);

}  // namespace weft::tools
