// Model descriptions without allocation: the shapes LlamaConfig computes are those a built
// Llama registers; the Llama 3 configurations have Meta's parameter counts and describe
// themselves (weft-train --describe); every configuration in configs/ parses.
#include "weft/train/describe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "weft/nn/llama.h"
#include "weft/train/config.h"

namespace weft::train {
namespace {

using testing::HasSubstr;

TEST(DescribeTest, ComputedShapesAreTheBuiltModels) {
  nn::LlamaConfig grouped{.dim = 64,
                          .n_layers = 3,
                          .n_heads = 8,
                          .n_kv_heads = 2,
                          .vocab_size = 300,
                          .multiple_of = 16,
                          .ffn_dim_multiplier = 1.3};
  nn::LlamaConfig tied{
      .dim = 32, .n_layers = 2, .n_heads = 2, .vocab_size = 256, .tie_embeddings = true};
  for (const nn::LlamaConfig& c : {grouped, tied, nn::LlamaConfig{}}) {
    const nn::Llama model(c);
    EXPECT_EQ(c.parameter_shapes(), model.whole_parameters());
    EXPECT_EQ(c.parameter_count(), model.whole_numel());
  }
  EXPECT_EQ(grouped.hidden_dim(), 224);  // 2/3 of 256 = 170, x 1.3 = 221, up to 224
}

TEST(DescribeTest, Llama3ConfigurationsHaveMetasSizes) {
  const struct {
    const char* file;
    std::int64_t parameters;
    const char* mesh;
  } models[] = {{"llama3_8b", 8'030'261'248, "= 8 ranks"},
                {"llama3_70b", 70'553'706'496, "tp 8 x pp 1 = 64 ranks"},
                {"llama3_405b", 405'853'388'800, "dp_shard 16 x cp 1 x tp 8 x pp 1 = 128 ranks"}};
  for (const auto& m : models) {
    const Config c = load_config(WEFT_SOURCE_DIR "/configs/" + std::string(m.file) + ".toml", {});
    EXPECT_EQ(c.model.parameter_count(), m.parameters) << m.file;
    const std::string text = describe(c);
    EXPECT_THAT(text, HasSubstr(m.mesh)) << text;
    EXPECT_THAT(text, HasSubstr("vocabulary 128256, rope theta 500000"));
    EXPECT_THAT(text, HasSubstr("layers.{0.." + std::to_string(c.model.n_layers - 1) +
                                "}.feed_forward.w1.weight"));
  }
}

TEST(DescribeTest, EveryConfigurationParses) {
  int n = 0;
  for (const auto& f : std::filesystem::directory_iterator(WEFT_SOURCE_DIR "/configs")) {
    if (f.path().extension() != ".toml") continue;
    EXPECT_NO_THROW(load_config(f.path().string(), {})) << f.path();
    ++n;
  }
  EXPECT_GE(n, 7);
}

TEST(DescribeTest, VocabularyZeroNeedsTheTokenizer) {
  Config c;
  c.model.vocab_size = 0;
  EXPECT_THAT(describe(c), HasSubstr("vocabulary 256"));  // bytes
  c.tokenizer.path = "/nonexistent/tokenizer.json";
  EXPECT_THROW(describe(c), ConfigError);
}

}  // namespace
}  // namespace weft::train
