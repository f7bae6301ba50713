// One rank of a job started by weftrun or mpirun: joins the world group on $WEFT_BACKEND (or
// on the default backend, which must then be $WEFT_EXPECT_BACKEND) and runs every collective
// value check on every engine the backend gives its groups. Not a ctest test by itself;
// tests/dist/CMakeLists.txt runs it under weftrun with 1 to 4 ranks on each process backend,
// under mpirun, and across network namespaces (tests/dist/netns).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "tests/dist/collective_checks.h"
#include "weft/dist.h"

namespace weft::dist {
namespace {

// On the auto backend across hosts of several ranks each (weftrun numbers ranks host by
// host): a subgroup within one host runs on its shared memory; subgroups laid out as the world
// is run in two levels, whatever the order of their hosts; one that interleaves the hosts runs
// flat. Called before anything else spends the hosts' pools of shared regions. EXPECT, not
// ASSERT, between collectives: a rank that left early would hang the others. Every dtype on
// the first group across hosts; float, every collective, small to large, on the others (the
// suite's time on 2 cores).
// `cross`: the engine between hosts ("generic" over tcp, "mpi").
void check_subgroups_across_hosts(ProcessGroup& pg, int per_host, const std::string& cross) {
  const auto expect_two_levels = [&cross](const ProcessGroup& group) {
    const std::string name(group.engine_name());
    EXPECT_TRUE(name.starts_with("hierarchical(") && name.ends_with(", " + cross + ")")) << name;
  };
  const auto check = [](ProcessGroup& group) {
    test::all_checks<float>(group);
    test::large_checks<float>(group);
  };
  const int n = pg.size();
  // Within one host: the last host's ranks in reverse order (group ranks unlike shm ranks),
  // then the first host's ranks, twice, so that from here on the hosts offer different region
  // indices to the groups across them.
  std::vector<int> last_host;
  for (int r = n - 1; r >= n - per_host; --r) last_host.push_back(r);
  std::vector<int> first_host(static_cast<std::size_t>(per_host));
  std::iota(first_host.begin(), first_host.end(), 0);
  for (const auto& members : {last_host, first_host, first_host}) {
    auto group = pg.new_group(members);
    const bool member = std::find(members.begin(), members.end(), pg.rank()) != members.end();
    EXPECT_EQ(group != nullptr, member);
    if (group == nullptr) continue;
    EXPECT_EQ(group->engine_name(), "shm");
    check(*group);
  }
  std::vector<int> hosts_rotated;  // the last host's block first
  std::vector<int> interleaved;    // local index major: every block spans all hosts
  for (int r = 0; r < n; ++r) hosts_rotated.push_back((r + n - per_host) % n);
  for (int i = 0; i < per_host; ++i) {
    for (int r = i; r < n; r += per_host) interleaved.push_back(r);
  }
  // More subgroups than a host's pool of 6 regions: the first's host parts run on pooled
  // regions, the fifth's on the first host's rings and the other hosts' regions, the last's
  // on rings everywhere.
  for (int i = 0; i < 8; ++i) {
    auto group = pg.new_group(hosts_rotated);
    expect_two_levels(*group);
    if (i == 0 || i == 7) {
      const std::string host_part = i == 0 ? "shm" : "generic";
      EXPECT_EQ(group->engine_name(), "hierarchical(" + host_part + ", " + cross + ")");
    }
    if (i == 0) test::all_checks_every_dtype(*group);
    if (i == 4 || i == 7) check(*group);
  }
  auto flat = pg.new_group(interleaved);
  EXPECT_EQ(flat->engine_name(), cross);
  check(*flat);
  if (n / per_host < 3) return;
  std::vector<int> two_hosts(static_cast<std::size_t>(2 * per_host));  // the first two
  std::iota(two_hosts.begin(), two_hosts.end(), 0);
  auto part = pg.new_group(two_hosts);
  EXPECT_EQ(part != nullptr, pg.rank() < 2 * per_host);
  if (part == nullptr) return;
  expect_two_levels(*part);
  check(*part);
}

// A collective table may put any algorithm at any size (weft-bench --tune): each algorithm
// the thresholds choose among, forced at every size, gives the same values.
void check_every_algorithm(ProcessGroup& pg) {
  constexpr std::size_t kNever = std::size_t{1} << 48;
  CollectiveTuning single_copy, one_step, sliced, ring;
  single_copy.one_step_all_reduce_max = 0;
  single_copy.single_copy_all_reduce_min = single_copy.single_copy_broadcast_min = 0;
  single_copy.single_copy_all_reduce_max = single_copy.single_copy_broadcast_max = kNever;
  single_copy.single_copy_all_gather_min = 0;
  single_copy.single_copy_all_gather_max = kNever;
  one_step.one_step_all_reduce_max = kNever;  // at most a slot, whatever the table says
  sliced.one_step_all_reduce_max = 0;
  sliced.single_copy_all_reduce_min = sliced.single_copy_broadcast_min = kNever;
  sliced.single_copy_all_gather_min = kNever;
  ring.ring_all_reduce_min = 0;
  const CollectiveTuning agreed = pg.tuning();
  for (const CollectiveTuning& t : {single_copy, one_step, sliced, ring}) {
    pg.tune(t);
    test::all_checks<float>(pg);
    test::all_checks<BFloat16>(pg);
  }
  pg.tune(agreed);
}

// The world group, then subgroups of every rank until the backend's engines for subgroups
// have all been seen: on shm the step engine over a pooled region, and once the pool is
// spent the generic engine over the rings; on tcp the generic engine.
TEST(DistWorker, AllCollectivesOnEveryEngine) {
  auto pg = init_process_group();
  const char* named = std::getenv("WEFT_BACKEND");
  const char* expected = named != nullptr ? named : std::getenv("WEFT_EXPECT_BACKEND");
  ASSERT_NE(expected, nullptr) << "set WEFT_BACKEND, or WEFT_EXPECT_BACKEND for the default";
  EXPECT_EQ(pg->backend_name(), expected);
  // Across hosts of two or more ranks each, the world group runs in two levels:
  // "hierarchical(shm, <cross>)".
  if (const char* expect = std::getenv("WEFT_EXPECT_WORLD_ENGINE")) {
    const std::string world(expect);
    EXPECT_EQ(pg->engine_name(), world);
    const auto launched = launch_environment();
    ASSERT_TRUE(launched) << "run under weftrun or mpirun";
    const std::size_t comma = world.find(", ");
    ASSERT_TRUE(comma != std::string::npos && world.ends_with(")")) << world;
    const std::string cross = world.substr(comma + 2, world.size() - comma - 3);
    check_subgroups_across_hosts(*pg, launched->local_world_size, cross);
  }
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
  check_every_algorithm(*pg);
}

}  // namespace
}  // namespace weft::dist
