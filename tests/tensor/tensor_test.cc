#include "weft/tensor/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>

namespace weft {
namespace {

using testing::HasSubstr;

Tensor iota(const Shape& shape) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.0f);
  return Tensor::from(v, shape);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

// A dtype's name parses back to it (the configs' and tools' dtype keys); others name the choices.
TEST(DTypeTest, NamesParseBack) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
                  DType::kUInt8, DType::kInt32, DType::kInt64}) {
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
  EXPECT_THAT([] { parse_dtype("bf16"); },
              ::testing::ThrowsMessage<InvalidArgument>(::testing::HasSubstr("bfloat16")));
}

TEST(TensorTest, ZerosAreContiguousAlignedAndZero) {
  Tensor t = Tensor::zeros({3, 5});
  EXPECT_EQ(t.shape(), (Shape{3, 5}));
  EXPECT_EQ(t.strides(), (Shape{5, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data<float>()) % 64, 0u);
  for (float x : t.to_vector<float>()) EXPECT_EQ(x, 0.0f);
  EXPECT_EQ(t.nbytes(), 60u);
}

TEST(TensorTest, NarrowIsAViewOfTheSameStorage) {
  Tensor t = iota({4, 3});
  Tensor rows = t.narrow(0, 1, 2);
  EXPECT_TRUE(rows.shares_storage(t));
  EXPECT_EQ(rows.to_vector<float>(), (std::vector<float>{3, 4, 5, 6, 7, 8}));
  rows.fill(-1);
  EXPECT_EQ(t.to_vector<float>()[3], -1.0f);
  Tensor cols = t.narrow(1, 1, 1);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.to_vector<float>(), (std::vector<float>{1, -1, -1, 10}));
}

// Released storage keeps its views' places; restored, it is zero-filled and every view sees
// the new bytes. Small blocks come from the heap, large ones (>= 256 KiB) from mmap.
TEST(TensorTest, StorageReleaseAndRestoreKeepViews) {
  for (std::int64_t rows : {4, 1024}) {
    Tensor whole = Tensor::zeros({rows, 128});
    Tensor part = whole.narrow(0, 2, 2);
    part.fill(3.0);
    Storage* storage = whole.storage();
    ASSERT_EQ(part.storage(), storage);
    EXPECT_TRUE(storage->resident());
    storage->release();
    EXPECT_FALSE(storage->resident());
    EXPECT_THROW(part.data<float>(), InvalidArgument);
    EXPECT_THROW(part.to_vector<float>(), InvalidArgument);
    EXPECT_THROW(part.fill(1.0), InvalidArgument);
    EXPECT_THROW(whole.bytes(), InvalidArgument);
    storage->release();  // twice is harmless
    storage->restore();
    EXPECT_TRUE(storage->resident());
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(storage->data()) % 64, 0u);
    EXPECT_EQ(part.data<float>(), whole.data<float>() + 2 * 128);
    for (float v : part.to_vector<float>()) ASSERT_EQ(v, 0.0f);
    part.fill(5.0);
    EXPECT_EQ(whole.to_vector<float>()[static_cast<std::size_t>(2 * 128)], 5.0f);
    storage->restore();  // resident already: keeps the data
    EXPECT_EQ(whole.to_vector<float>()[static_cast<std::size_t>(3 * 128 + 127)], 5.0f);
  }
}

// "THPeligible: 1" in /proc/self/smaps for the mapping that holds `address`.
bool huge_page_eligible(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &begin, &end) == 2) {
      inside = begin <= at && at < end;
    } else if (inside && line.starts_with("THPeligible:")) {
      return line.find('1') != std::string::npos;
    }
  }
  return false;
}

TEST(TensorTest, LargeStoragesAskForHugePages) {
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(mode, modes);
  if (modes.empty() || modes.find("[never]") != std::string::npos) {
    GTEST_SKIP() << "transparent huge pages are off on this system";
  }
  Tensor large = Tensor::zeros({1024, 1024});  // 4 MiB
  EXPECT_TRUE(huge_page_eligible(large.data<float>()));
  large.storage()->release();
  large.storage()->restore();
  EXPECT_TRUE(huge_page_eligible(large.data<float>()));
}

TEST(TensorTest, SliceTakesPythonBounds) {
  Tensor t = iota({5, 2});
  EXPECT_EQ(t.slice(0, 1, 3).to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(t.slice(0, -2, 100).to_vector<float>(), (std::vector<float>{6, 7, 8, 9}));
  EXPECT_EQ(t.slice(1, 1, 2).to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9}));
  EXPECT_EQ(t.slice(0, 4, 2).numel(), 0);
  EXPECT_TRUE(t.slice(0, 1, 3).shares_storage(t));
}

TEST(TensorTest, TransposeSwapsStridesAndContiguousCopies) {
  Tensor t = iota({2, 3});
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.shares_storage(t));
  EXPECT_EQ(c.to_vector<float>(), tt.to_vector<float>());
  EXPECT_TRUE(t.contiguous().shares_storage(t));  // already contiguous: no copy
}

TEST(TensorTest, ViewAndReshape) {
  Tensor t = iota({2, 3, 4});
  Tensor v = t.view({6, -1});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_TRUE(v.shares_storage(t));
  Tensor r = t.transpose(1, 2).reshape({2, 12});  // not contiguous: copied
  EXPECT_FALSE(r.shares_storage(t));
  EXPECT_EQ(r.to_vector<float>()[1], 4.0f);
  EXPECT_THAT(error_of([&] { t.transpose(0, 1).view({24}); }), HasSubstr("non-contiguous"));
  EXPECT_THAT(error_of([&] { t.view({5, -1}); }), HasSubstr("cannot infer"));
  EXPECT_THAT(error_of([&] { t.view({5, 5}); }), HasSubstr("has 25 elements"));
}

TEST(TensorTest, CopyFromAnyLayout) {
  Tensor t = iota({3, 4});
  Tensor dst = Tensor::zeros({4, 3});
  dst.copy_from(t.transpose(0, 1));
  EXPECT_EQ(dst.to_vector<float>(), t.transpose(0, 1).to_vector<float>());
  Tensor cols = Tensor::zeros({3, 4}).narrow(1, 0, 2);
  cols.copy_from(t.narrow(1, 2, 2));
  EXPECT_EQ(cols.to_vector<float>(), (std::vector<float>{2, 3, 6, 7, 10, 11}));
  EXPECT_THAT(error_of([&] { dst.copy_from(t); }), HasSubstr("source [3, 4] float32 into [4, 3]"));
}

TEST(TensorTest, DtypesAndConversions) {
  Tensor b = Tensor::zeros({3}, DType::kBFloat16);
  b.fill(1.5);
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1.5f, 1.5f, 1.5f}));
  Tensor i = Tensor::from(std::vector<std::int64_t>{1, 2, 3}, {3});
  EXPECT_EQ(i.to_vector<double>(), (std::vector<double>{1, 2, 3}));
  EXPECT_THAT(error_of([&] { i.data<float>(); }), HasSubstr("data<float32>() on a int64 tensor"));
}

TEST(TensorTest, BadArgumentsNameTheValues) {
  Tensor t = Tensor::zeros({2, 3});
  EXPECT_THAT(error_of([&] { t.narrow(1, 2, 2); }), HasSubstr("outside size 3 of shape [2, 3]"));
  EXPECT_THAT(error_of([&] { t.size(2); }), HasSubstr("dimension 2 is out of range"));
  EXPECT_EQ(t.size(-1), 3);
  EXPECT_THAT(error_of([] {
                Tensor::from(std::vector<float>{1, 2}, {3});
              }),
              HasSubstr("2 values for shape [3]"));
  EXPECT_THAT(error_of([] { Tensor::zeros({2, -1}); }), HasSubstr("negative size"));
}

TEST(TensorTest, EmptyTensors) {
  Tensor e;
  EXPECT_FALSE(e.defined());
  EXPECT_EQ(e.numel(), 0);
  Tensor z = Tensor::zeros({0, 4});
  EXPECT_EQ(z.numel(), 0);
  EXPECT_TRUE(z.clone().to_vector<float>().empty());
}

}  // namespace
}  // namespace weft
