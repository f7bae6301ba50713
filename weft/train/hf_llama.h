// Hugging Face's Llama layout (transformers' LlamaForCausalLM), in and out:
//   - config.json: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
//     num_key_value_heads, vocab_size, rms_norm_eps, rope_theta, tie_word_embeddings, ...;
//   - model.safetensors, or shards named by model.safetensors.index.json's weight_map;
//   - HF's names (model.layers.0.self_attn.q_proj.weight for layers.0.attention.wq.weight);
//   - q_proj's and k_proj's rows permuted: weft (like Meta and TorchTitan) rotates adjacent
//     pairs (2i, 2i+1) of each head, HF's rotate_half the halves (i, i + head_dim/2), so HF's
//     conversion script moves row 2i + j of a head to row j * head_dim/2 + i.
// Read as the start of a run (checkpoint.initial_load_path) and written by weft-ckpt
// consolidate: a round trip is bitwise. docs/CHECKPOINTS.md has the whole mapping.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "weft/nn/llama.h"
#include "weft/tensor/tensor.h"

namespace weft::train {

// HF's name of a weft parameter ("norm.weight" -> "model.norm.weight"); weft's name of an HF
// tensor, or nullopt for one weft has no parameter for.
std::string hf_name(const std::string& weft_name);
std::optional<std::string> weft_name(const std::string& hf);

// A q or k weight ([heads x head_dim, dim]) from weft's rotary layout to HF's (to_hf), or back.
Tensor permute_rotary(const Tensor& weight, std::int64_t heads, bool to_hf);
// `weight` as HF stores it (q and k permuted), or from HF's into weft's.
Tensor to_hf_layout(const std::string& weft_name, const Tensor& weight, const nn::LlamaConfig& c);
Tensor from_hf_layout(const std::string& weft_name, const Tensor& weight, const nn::LlamaConfig& c);

// config.json for `c`; `dtype` is the weights' ("float32", "bfloat16").
nlohmann::ordered_json hf_config(const nn::LlamaConfig& c, const std::string& dtype,
                                 std::optional<std::int32_t> bos, std::optional<std::int32_t> eos);
// The model config.json describes. Throws ConfigError naming `path` and the field for what weft
// does not implement (another architecture or activation, biases, rope_scaling) or a missing
// field.
nn::LlamaConfig from_hf_config(const nlohmann::json& j, const std::string& path);

// Every parameter of a Hugging Face folder, in weft's names and layout, float32 (F32, BF16
// and F16 files are read), one safetensors file at a time: `use` is called once per
// parameter. Throws ConfigError naming the folder when its config.json differs from `model`
// (each differing field named), a parameter is missing or has another shape.
void read_hf_model(const std::string& folder, const nn::LlamaConfig& model,
                   const std::function<void(const std::string& name, const Tensor& value)>& use);

}  // namespace weft::train
