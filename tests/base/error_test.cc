#include "weft/base/error.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace weft {
namespace {

TEST(ErrorTest, HierarchyIsRootedAtWeftError) {
  EXPECT_THROW(throw BrokenProcessPool("x"), BrokenExecutor);
  EXPECT_THROW(throw BrokenExecutor("x"), Error);
  EXPECT_THROW(throw TimeoutError("x"), Error);
  EXPECT_THROW(throw Error("x"), std::runtime_error);
}

TEST(ErrorTest, RemoteErrorCarriesTypeAndMessage) {
  RemoteError e("std::out_of_range", "index 7");
  EXPECT_EQ(e.type_name(), "std::out_of_range");
  EXPECT_EQ(e.remote_what(), "index 7");
  EXPECT_NE(std::string(e.what()).find("std::out_of_range"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("index 7"), std::string::npos);
}

TEST(ErrorTest, SystemErrorNamesTheCallAndErrno) {
  SystemError e("open /nope", ENOENT);
  EXPECT_EQ(e.error_code(), ENOENT);
  EXPECT_EQ(std::string(e.what()), "open /nope: No such file or directory");
}

}  // namespace
}  // namespace weft
