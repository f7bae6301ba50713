// weft-generate: samples text from a weft-train checkpoint with a KV cache.
//
//   weft-generate --checkpoint checkpoints/debug --prompt "ROMEO:" --max-new-tokens 200
//                 --temperature 0.8 --top-k 40 --seed 1
//
// --checkpoint is a checkpoint's step directory, or a folder whose newest complete checkpoint
// is used; any layout weft-train saved from (docs/CHECKPOINTS.md). Exit codes: 0 printed the text;
// 2 bad arguments; 1 the checkpoint cannot be used.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "weft/base/simd.h"
#include "weft/data/tokenizer.h"
#include "weft/train/checkpointing.h"
#include "weft/train/config.h"
#include "weft/train/generate.h"

int main(int argc, char** argv) {
  CLI::App app("weft-generate: samples text from a weft-train checkpoint", "weft-generate");
  std::string checkpoint, prompt = "ROMEO:";
  weft::train::SamplingOptions o;
  // --help shows each option's default from the variable it sets, never a copy of the value.
  app.option_defaults()->always_capture_default();
  app.add_option("--checkpoint", checkpoint,
                 "checkpoint step directory, or folder (its newest complete checkpoint)")
      ->required();
  app.add_option("--prompt", prompt, "the text to continue");
  app.add_option("--max-new-tokens", o.max_new_tokens,
                 "tokens to generate (fewer at EOS or the model's max_seq_len)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--temperature", o.temperature, "softmax temperature; 0: the most likely token")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-k", o.top_k, "sample among the k most likely tokens; 0: among all")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--seed", o.seed, "random seed: the same seed gives the same text");
  std::string dtype;
  app.add_option("--dtype", dtype,
                 "the matrix products' operands: float32 or bfloat16; default: the checkpoint's "
                 "training.mixed_precision_param")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help, or a usage error (CLI11's own codes are 100+)
  }
  if (!std::isfinite(o.temperature)) {  // CLI::Range lets a NaN through
    std::fprintf(stderr, "weft-generate: --temperature: %g is not a number from 0 to 100\n",
                 o.temperature);
    return 2;
  }
  try {
    weft::simd::use_target_from_env();  // WEFT_SIMD_TARGET=AVX2: that vector path
    const std::string dir = weft::train::checkpoint_directory(checkpoint);
    const weft::train::Config config = weft::train::parse_config(
        weft::train::read_manifest(dir).config, "the configuration in " + dir + "/manifest.json");
    if (dtype.empty()) dtype = config.training.mixed_precision_param;
    weft::nn::set_matmul_dtype(weft::parse_dtype(dtype));
    weft::nn::Llama model(config.model);
    weft::train::load_model(dir, model);
    const auto tokenizer =
        weft::data::load_tokenizer(config.tokenizer.path, config.tokenizer.encoding);
    std::cout << weft::train::generate(model, *tokenizer, prompt, o) << std::endl;
  } catch (const weft::InvalidArgument& e) {  // a bad prompt or checkpoint path
    std::fprintf(stderr, "weft-generate: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft-generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
