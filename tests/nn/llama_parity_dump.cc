// Writes what tests/nn/torch_parity.py compares against PyTorch, into the directory given as
// the only argument:
//   init.safetensors   the initial weights (metadata: the model config and the batch shape)
//   step0.safetensors  tokens, targets, logits, loss and every parameter's gradient
//   train.safetensors  the losses of 10 AdamW steps from the initial weights
// A second argument names the SIMD target ("best": the CPU's best), a third the products'
// dtype: float32 (default) or bfloat16 (mixed precision, which torch_parity.py then compares
// against PyTorch's bf16 autocast; the metadata says which).
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "weft/base/simd.h"
#include "weft/checkpoint/safetensors.h"
#include "weft/nn/llama.h"
#include "weft/nn/optim.h"
#include "weft/tensor/random.h"

namespace {

using weft::Shape;
using weft::Tensor;
using weft::checkpoint::NamedTensor;

constexpr std::int64_t kBatch = 2, kSeq = 32;
constexpr int kTrainSteps = 10;

std::vector<NamedTensor> parameters(weft::nn::ParameterList& params, bool grads) {
  std::vector<NamedTensor> out;
  for (const auto& p : params.all())
    out.push_back({p->name, grads ? p->grad.clone() : p->value.clone()});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: llama_parity_dump OUT_DIR [SIMD_TARGET [float32|bfloat16]]\n");
    return 2;
  }
  const std::string dtype = argc == 4 ? argv[3] : "float32";
  if (dtype != "float32" && dtype != "bfloat16") {
    std::fprintf(stderr, "llama_parity_dump: dtype %s is neither float32 nor bfloat16\n",
                 dtype.c_str());
    return 2;
  }
  weft::nn::set_matmul_dtype(weft::parse_dtype(dtype));
  if (argc >= 3 && std::string(argv[2]) != "best") {
    // That target's kernels; exit 77 (ctest's skip) where this CPU lacks it.
    const auto targets = weft::simd::supported_targets();
    if (std::find(targets.begin(), targets.end(), argv[2]) == targets.end()) {
      std::printf("skipped: this CPU does not run SIMD target %s\n", argv[2]);
      return 77;
    }
    weft::simd::use_target(argv[2]);
  }
  const std::string dir = argv[1];
  const weft::nn::LlamaConfig config{.dim = 64,
                                     .n_layers = 2,
                                     .n_heads = 4,
                                     .n_kv_heads = 2,
                                     .vocab_size = 256,
                                     .multiple_of = 32,
                                     .max_seq_len = kSeq};
  weft::nn::Llama model(config);
  model.init_weights(7);

  std::vector<std::int32_t> tokens(kBatch * kSeq), targets(kBatch * kSeq);
  const weft::PhiloxKey key = weft::philox_key(1, "batch");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>(weft::philox_uniform(key, 2 * i) * 256);
    targets[i] = static_cast<std::int32_t>(weft::philox_uniform(key, 2 * i + 1) * 256);
  }
  const nlohmann::json meta = {{"dim", config.dim},
                               {"n_layers", config.n_layers},
                               {"n_heads", config.n_heads},
                               {"n_kv_heads", config.n_kv_heads},
                               {"vocab_size", config.vocab_size},
                               {"hidden_dim", config.hidden_dim()},
                               {"rope_theta", config.rope_theta},
                               {"norm_eps", config.norm_eps},
                               {"batch", kBatch},
                               {"seq", kSeq},
                               {"lr", 1e-3},
                               {"weight_decay", 0.1},
                               {"beta1", 0.9},
                               {"beta2", 0.95},
                               {"eps", 1e-8},
                               {"matmul_dtype", dtype}};
  weft::checkpoint::save_safetensors(
      dir + "/init.safetensors", parameters(model.parameters(), false), {{"config", meta.dump()}});

  model.parameters().zero_grad();
  const double loss = model.forward(tokens.data(), targets.data(), kBatch, kSeq);
  model.backward();
  std::vector<NamedTensor> step0 = parameters(model.parameters(), true);
  step0.push_back({"__tokens", Tensor::from(tokens, {kBatch, kSeq})});
  step0.push_back({"__targets", Tensor::from(targets, {kBatch, kSeq})});
  step0.push_back({"__logits", model.logits().clone()});
  step0.push_back({"__loss", Tensor::from(std::vector<double>{loss}, {1})});
  weft::checkpoint::save_safetensors(dir + "/step0.safetensors", step0);

  weft::nn::AdamW adamw(
      model.parameters(),
      {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
  std::vector<double> losses;
  for (int step = 0; step < kTrainSteps; ++step) {
    model.parameters().zero_grad();
    losses.push_back(model.forward(tokens.data(), targets.data(), kBatch, kSeq));
    model.backward();
    adamw.step(1e-3);
  }
  weft::checkpoint::save_safetensors(dir + "/train.safetensors",
                                     {{"losses", Tensor::from(losses, {kTrainSteps})}});
  return 0;
}
