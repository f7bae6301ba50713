// A configuration's layout chosen by estimate::plan (weft-plan, weft-train's
// parallelism.auto_machine): the request a configuration makes, and the chosen layout written
// back as configuration keys.
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "weft/dist/process_group.h"
#include "weft/estimate/plan.h"
#include "weft/train/config.h"

namespace weft::train {

// The plan for `config`'s model, sequence length, precision and optimizer on `world` ranks,
// within `memory_per_rank` bytes, at `global_batch` sequences a step; 0: batch_size x the
// data-parallel degree the configuration gives on that many ranks (ConfigError when its
// degrees do not cut `world`).
estimate::PlanRequest plan_request(const Config& config, int world, std::int64_t memory_per_rank,
                                   std::int64_t global_batch = 0);

// The [parallelism] and [training] keys that give `job`'s layout, as "section.key" and value
// (what --section.key value takes).
std::vector<std::pair<std::string, std::string>> layout_keys(const estimate::Job& job);

// `config` with `job`'s layout (the keys above) in place of its own.
Config with_layout(Config config, const estimate::Job& job);

// weft-train's parallelism.auto_machine: `config` with the layout plan() ranks first for the
// world's ranks (one without a world), `host_ranks` a host, within the memory a host has for
// each of its ranks (the least any rank sees, so that every rank chooses the same), and one
// line on `out` saying which. `config` as it is when auto_machine is empty. Collective over
// the world: ConfigError on every rank when any cannot read the machine's file or its
// memory, or no layout fits.
Config with_planned_layout(Config config, dist::ProcessGroup* world, int host_ranks,
                           std::ostream& out);

}  // namespace weft::train
