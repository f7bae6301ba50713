// One rank of a job started by weftrun: joins the world group on the tcp backend and runs
// every collective value check. Not a ctest test by itself; tests/dist/CMakeLists.txt runs
// it under weftrun with 1 to 4 ranks.
#include <gtest/gtest.h>

#include "tests/dist/collective_checks.h"
#include "weft/dist.h"

namespace weft::dist {
namespace {

TEST(TcpWorker, AllCollectives) {
  auto pg = init_process_group({.backend = "tcp"});
  EXPECT_EQ(pg->backend_name(), "tcp");
  test::all_checks_every_dtype(*pg);
}

}  // namespace
}  // namespace weft::dist
