// One rank of a job started by weftrun: joins the world group on weftrun's --backend and
// runs every collective value check. Not a ctest test by itself; tests/dist/CMakeLists.txt
// runs it under weftrun with 1 to 4 ranks on each process backend.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/dist/collective_checks.h"
#include "weft/dist.h"

namespace weft::dist {
namespace {

TEST(DistWorker, AllCollectives) {
  auto pg = init_process_group();
  EXPECT_EQ(pg->backend_name(), std::getenv("WEFT_BACKEND"));
  test::all_checks_every_dtype(*pg);
}

}  // namespace
}  // namespace weft::dist
