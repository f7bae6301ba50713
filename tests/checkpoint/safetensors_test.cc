#include "weft/checkpoint/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"

namespace weft::checkpoint {
namespace {

using testing::HasSubstr;
namespace fs = std::filesystem;

class SafetensorsTest : public testing::Test {
 protected:
  std::string path(const std::string& name) const { return tmp_.file(name); }

  // Writes raw bytes: an 8-byte length, then `header`, then `data`.
  // `claimed_length` 0: the header's real length.
  void write_raw(const std::string& p, const std::string& header, const std::string& data,
                 std::uint64_t claimed_length = 0) {
    if (claimed_length == 0) claimed_length = header.size();
    std::ofstream out(p, std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(claimed_length >> (8 * i)));
    out << header << data;
  }
  std::string load_error(const std::string& p) {
    try {
      load_safetensors(p);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "no error";
  }

  const test::TempDir tmp_{"weft-st"};
  const fs::path& dir_ = tmp_.path();
};

TEST_F(SafetensorsTest, RoundTripsDtypesShapesAndMetadata) {
  Tensor f = Tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::zeros({4}, DType::kBFloat16);
  b.fill(0.5);
  Tensor i = Tensor::from(std::vector<std::int64_t>{7, -8}, {2});
  save_safetensors(
      path("a.safetensors"),
      {{"w", f.transpose(0, 1)}, {"b", b}, {"step", i}, {"empty", Tensor::zeros({0, 3})}},
      {{"format", "weft"}, {"step", "12"}});
  const SafetensorsFile file = load_safetensors(path("a.safetensors"));
  ASSERT_EQ(file.tensors.size(), 4u);
  EXPECT_EQ(file.tensors[0].name, "w");  // file order is write order
  EXPECT_EQ(file.at("w").shape(), (Shape{3, 2}));
  EXPECT_EQ(file.at("w").to_vector<float>(), f.transpose(0, 1).to_vector<float>());
  EXPECT_EQ(file.at("b").dtype(), DType::kBFloat16);
  EXPECT_EQ(file.at("b").to_vector<float>(), (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(file.at("step").to_vector<std::int64_t>(), (std::vector<std::int64_t>{7, -8}));
  EXPECT_EQ(file.metadata.at("step"), "12");
  EXPECT_THROW(file.at("nope"), CheckpointError);
}

TEST_F(SafetensorsTest, ReplacesAtomicallyAndLeavesNoTemporaryFiles) {
  const std::string p = path("m.safetensors");
  save_safetensors(p, {{"x", Tensor::from(std::vector<float>{1}, {1})}});
  save_safetensors(p, {{"x", Tensor::from(std::vector<float>{2}, {1})}});
  EXPECT_EQ(load_safetensors(p).at("x").to_vector<float>()[0], 2.0f);
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1);
  // A write that cannot happen leaves the old file as it was.
  EXPECT_THROW(save_safetensors(path("missing-dir/m.safetensors"), {}), SystemError);
  EXPECT_EQ(load_safetensors(p).at("x").to_vector<float>()[0], 2.0f);
}

TEST_F(SafetensorsTest, DamagedFilesAreClearErrorsNotCrashes) {
  const std::string p = path("bad.safetensors");
  write_raw(p, "", "");
  EXPECT_THAT(load_error(p), HasSubstr("header is not JSON"));
  write_raw(p, "{}", "", 1'000'000);
  EXPECT_THAT(load_error(p), HasSubstr("exceeds the file"));
  write_raw(p, R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "abcd");
  EXPECT_THAT(load_error(p), HasSubstr("claims bytes [0, 16) of 4"));
  write_raw(p, R"({"x":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})", "abcd");
  EXPECT_THAT(load_error(p), HasSubstr("unknown dtype Q7"));
  write_raw(p, R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "abcdefgh");
  EXPECT_THAT(load_error(p), HasSubstr("gaps"));
  write_raw(p, R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd");
  EXPECT_THAT(load_error(p), HasSubstr("bad shape"));
  // 2^64 + 2^20 elements: the product wraps to 2^20 without the overflow check.
  write_raw(p, R"({"x":{"dtype":"U8","shape":[1048576,17,1034834473201],"data_offsets":[0,4]}})",
            "abcd");
  EXPECT_THAT(load_error(p), HasSubstr("bad shape"));
  write_raw(p, R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "abcd");
  EXPECT_THAT(load_error(p), HasSubstr("2 bytes after the last tensor"));
  write_raw(p, R"({"x":{"dtype":"F32"}})", "");
  EXPECT_THAT(load_error(p), HasSubstr("malformed"));
  EXPECT_THAT(load_error(path("absent")), HasSubstr("cannot open"));
  std::ofstream(p, std::ios::trunc) << "abc";
  EXPECT_THAT(load_error(p), HasSubstr("shorter than"));
}

}  // namespace
}  // namespace weft::checkpoint
