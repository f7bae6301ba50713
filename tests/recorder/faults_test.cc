// The flight recorder's fault suite: a 2-rank job under weftrun (tests/recorder/fault_worker.cc)
// commits one fault, and weftrun's diagnosis must name the rank behind, or the ranks that
// diverged, the collective, its site and what the other rank was doing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace weft::test {
namespace {

using ::testing::HasSubstr;

struct Fault {
  std::string name;
  bool debug;  // under WEFT_DIST_DEBUG=detail: faults the default mode lets pass
  std::vector<std::string> expect;
};

void PrintTo(const Fault& f, std::ostream* os) { *os << f.name; }

class FaultTest : public testing::TestWithParam<Fault> {};

TEST_P(FaultTest, WeftrunNamesTheCulprit) {
  const Fault& f = GetParam();
  EnvChanges env{
      {"WEFT_JOB_TOKEN", std::nullopt},
      {"WEFT_BACKEND", std::nullopt},
      {"WEFT_FLIGHT_RECORDER", std::nullopt},
      {"WEFT_DIST_DEBUG", f.debug ? std::optional<std::string>("detail") : std::nullopt}};
  const Finished r =
      run({WEFTRUN, "--nproc-per-node", "2", FAULT_WORKER, f.name}, env, Seconds(60));
  EXPECT_GT(r.code, 0) << r.err;
  for (const std::string& e : f.expect) EXPECT_THAT(r.err, HasSubstr(e));
}

const std::string kBehind = "weftrun: flight recorder: rank 1 is behind on group 'world': ";
const std::string kLastCompleted =
    "rank 1's last collective there is #2 all_reduce(count=4, dtype=float32, op=sum) "
    "(completed, at 'step 2')";
const std::string kDiverged =
    "weftrun: flight recorder: ranks diverged on group 'world' at collective #3: rank 0 called "
    "all_reduce(count=4, dtype=float32, op=sum) at 'step 3'; rank 1 called ";

INSTANTIATE_TEST_SUITE_P(
    Faults, FaultTest,
    testing::Values(
        Fault{"missing", false, {kBehind + kLastCompleted, "rank 0 reached #3 all_reduce(count=4"}},
        Fault{"extra",
              false,
              {"rank 1's last collective there is #3", "rank 0 reached #4", "at 'step 4'"}},
        Fault{"stop", false, {kBehind + kLastCompleted, "at 'step 3'"}},
        Fault{"kill", false, {kBehind + kLastCompleted, "(rank 1 was killed by signal 9"}},
        Fault{"subgroup", false, {"rank 1 is behind on group 'world/0'", "at 'step 3'"}},
        Fault{
            "size", false, {kDiverged + "all_reduce(count=8, dtype=float32, op=sum) at 'step 3'."}},
        Fault{"order",
              false,
              {"rank 1 is behind on group 'world'", "rank 0 is behind on group 'world/0'"}},
        Fault{"p2p",
              false,
              {"point-to-point operations that did not complete: rank 0 in recv(peer=1) on "
               "group 'world' (",
               "rank 1 in recv(peer=0) on group 'world' ("}},
        Fault{"collective", false, {kDiverged + "broadcast(count=4, dtype=float32, root=0)"}},
        Fault{"dtype", true, {kDiverged + "all_reduce(count=4, dtype=int32, op=sum)"}},
        Fault{"op", true, {kDiverged + "all_reduce(count=4, dtype=float32, op=max)"}},
        Fault{"root",
              true,
              {"ranks diverged on group 'world' at collective #3: rank 0 called "
               "broadcast(count=4, dtype=float32, root=0) at 'step 3'; rank 1 called "
               "broadcast(count=4, dtype=float32, root=1)"}}),
    [](const testing::TestParamInfo<Fault>& p) { return p.param.name; });

}  // namespace
}  // namespace weft::test
