#include "placement_options.h"

#include "weft/base/error.h"

namespace weft::tools {

void PlacementOptions::add_to(CLI::App& app) {
  app.add_option(
         "--backend", backend,
         "the job's backend: whose collectives' costs apply, and whose point-to-point rings count")
      ->capture_default_str();
  app.add_option("--ranks-per-host", ranks_per_host,
                 "ranks on each host, numbered host by host (0: all on one)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--link-latency-us", link_latency_us,
                 "the network between hosts: microseconds a message (with --link-gbs)")
      ->check(CLI::PositiveNumber);
  app.add_option("--link-gbs", link_gbs,
                 "the network between hosts: GB/s a rank sends (with --link-latency-us)")
      ->check(CLI::PositiveNumber);
}

estimate::Placement PlacementOptions::placement(int threads) const {
  estimate::Placement p;
  p.backend = backend;
  p.threads = threads;
  p.ranks_per_host = ranks_per_host;
  if ((link_latency_us > 0) != (link_gbs > 0))
    throw InvalidArgument("give the network as both --link-latency-us and --link-gbs");
  if (link_gbs > 0) {
    if (ranks_per_host == 0)
      throw InvalidArgument("a network between hosts needs --ranks-per-host");
    p.between_hosts = estimate::AlphaBeta{link_latency_us * 1e-6, 1 / (link_gbs * 1e9)};
  }
  return p;
}

}  // namespace weft::tools
