// Tests of vector code run once per SIMD target this build and CPU have (weft/base/simd.h):
// an AVX-512 machine tests its AVX2, SSE4 and portable paths too. Derive the suite's fixture
// from OnEveryTarget, write TEST_P, and instantiate it with WEFT_ON_EVERY_TARGET(Suite); the
// tests are named Suite.Name/AVX2 and so on.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "weft/base/simd.h"

namespace weft::testing {

class OnEveryTarget : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { simd::use_target(GetParam()); }
  void TearDown() override { simd::use_target(""); }
};

}  // namespace weft::testing

#define WEFT_ON_EVERY_TARGET(Suite)                                    \
  INSTANTIATE_TEST_SUITE_P(                                            \
      , Suite, ::testing::ValuesIn(::weft::simd::supported_targets()), \
      [](const ::testing::TestParamInfo<std::string>& target) { return target.param; })
