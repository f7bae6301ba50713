// One rank of a job started by weftrun: joins the world group on weftrun's --backend and
// runs every collective value check on every engine the backend gives its groups. Not a ctest
// test by itself; tests/dist/CMakeLists.txt runs it under weftrun with 1 to 4 ranks on each
// process backend.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "tests/dist/collective_checks.h"
#include "weft/dist.h"

namespace weft::dist {
namespace {

// The world group, then subgroups of every rank until the backend's engines for subgroups
// have all been seen: on shm the step engine over a pooled region, and once the pool is
// spent the generic engine over the rings; on tcp the generic engine.
TEST(DistWorker, AllCollectivesOnEveryEngine) {
  auto pg = init_process_group();
  EXPECT_EQ(pg->backend_name(), std::getenv("WEFT_BACKEND"));
  test::all_checks_every_dtype(*pg);
  std::vector<int> everyone(static_cast<std::size_t>(pg->size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  std::set<std::string> checked;
  std::vector<std::shared_ptr<ProcessGroup>> groups;
  for (int i = 0; i < 8; ++i) {
    groups.push_back(pg->new_group(everyone));
    const std::string engine(groups.back()->engine_name());
    if (!checked.insert(engine).second) continue;
    SCOPED_TRACE("subgroup on the " + engine + " engine");
    test::all_checks_every_dtype(*groups.back());
  }
  if (pg->backend_name() == "shm" && pg->size() > 1) {
    EXPECT_EQ(checked, (std::set<std::string>{"shm", "generic"}));
  }
  // Across hosts of two or more ranks each, the world group runs in two levels.
  if (const char* expect = std::getenv("WEFT_EXPECT_WORLD_ENGINE")) {
    EXPECT_EQ(pg->engine_name(), expect);
  }
}

}  // namespace
}  // namespace weft::dist
