#include "weft/base/function_ref.h"

#include <gtest/gtest.h>

#include <string>

namespace weft {
namespace {

int apply(FunctionRef<int(int)> f, int x) { return f(x); }

TEST(FunctionRefTest, CallsLambdasWithStateAndFunctions) {
  int calls = 0;
  auto counting = [&calls](int x) {
    ++calls;
    return x * 2;
  };
  EXPECT_EQ(apply(counting, 21), 42);
  EXPECT_EQ(apply([](int x) { return x + 1; }, 1), 2);
  EXPECT_EQ(calls, 1);
  int (*negate)(int) = [](int x) { return -x; };
  EXPECT_EQ(apply(negate, 3), -3);
}

TEST(FunctionRefTest, ForwardsReferencesAndMutatesTheReferredCallable) {
  std::string log;
  auto append = [&log](const std::string& s) { log += s; };
  const FunctionRef<void(const std::string&)> ref(append);
  ref("a");
  ref("b");
  EXPECT_EQ(log, "ab");
}

}  // namespace
}  // namespace weft
