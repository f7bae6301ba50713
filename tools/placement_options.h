// weft-estimate's and weft-plan's options for where a job runs (estimate::Placement): the
// collectives' backend, the ranks a host holds and the network between hosts. Not a library API.
#pragma once

#include <CLI/CLI.hpp>

#include "weft/estimate/step_time.h"

namespace weft::tools {

struct PlacementOptions {
  std::string backend = "shm";
  int ranks_per_host = 0;
  double link_latency_us = 0;  // 0 with link_gbs 0: no network given
  double link_gbs = 0;

  void add_to(CLI::App& app);
  // InvalidArgument when a network is given without ranks_per_host, or only half of it.
  estimate::Placement placement(int threads) const;
};

}  // namespace weft::tools
