#include "weft/train/hf_llama.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "weft/checkpoint/safetensors.h"
#include "weft/kernels/convert.h"
#include "weft/train/config.h"

namespace weft::train {

namespace fs = std::filesystem;

namespace {

// weft's part of a layer's name and HF's.
const std::pair<const char*, const char*> kLayerNames[] = {
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wo.weight", "self_attn.o_proj.weight"},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"},
    {"feed_forward.w2.weight", "mlp.down_proj.weight"},
    {"attention_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"}};
const std::pair<const char*, const char*> kModelNames[] = {
    {"tok_embeddings.weight", "model.embed_tokens.weight"},
    {"norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"}};

template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) {
    throw ConfigError(path + " has no \"" + key + "\"");
  }
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw ConfigError(path + ": \"" + key + "\" is " + j[key].dump() + ", not of the right type");
  }
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot read " + path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + " is not valid JSON: " + e.what());
  }
}

Tensor as_float32(const Tensor& t) {
  if (t.dtype() == DType::kFloat32) return t;
  Tensor f = Tensor::zeros(t.shape());
  float* out = f.data<float>();
  if (t.dtype() == DType::kBFloat16) {
    kernels::to_float(t.data<BFloat16>(), out, t.numel());
  } else if (t.dtype() == DType::kFloat16) {
    const Tensor whole = t.contiguous();
    const auto* in = reinterpret_cast<const Half*>(whole.bytes());
    for (std::int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<float>(in[i]);
  } else {
    throw ConfigError(std::string("a weight of dtype ") + std::string(dtype_name(t.dtype())) +
                      ": weft reads F32, BF16 and F16");
  }
  return f;
}

// The differences between the run's model and the folder's, one "field a vs b" each.
std::string differences(const nn::LlamaConfig& run, const nn::LlamaConfig& hf) {
  std::string out;
  auto check = [&](const char* name, auto a, auto b) {
    if (a != b) {
      std::ostringstream s;
      s << (out.empty() ? "" : ", ") << name << " " << a << " (the folder: " << b << ")";
      out += s.str();
    }
  };
  check("model.dim", run.dim, hf.dim);
  check("model.n_layers", run.n_layers, hf.n_layers);
  check("model.n_heads", run.n_heads, hf.n_heads);
  check("key/value heads", run.kv_heads(), hf.kv_heads());
  check("feed-forward size", run.hidden_dim(), hf.hidden_dim());
  check("model.vocab_size", run.vocab_size, hf.vocab_size);
  check("model.rope_theta", run.rope_theta, hf.rope_theta);
  check("model.norm_eps", run.norm_eps, hf.norm_eps);
  check("model.tie_embeddings", run.tie_embeddings, hf.tie_embeddings);
  return out;
}

}  // namespace

std::string hf_name(const std::string& name) {
  for (const auto& [weft, hf] : kModelNames) {
    if (name == weft) return hf;
  }
  if (name.rfind("layers.", 0) == 0) {
    const std::size_t dot = name.find('.', 7);
    const std::string rest = name.substr(dot + 1);
    for (const auto& [weft, hf] : kLayerNames) {
      if (rest == weft) return "model." + name.substr(0, dot + 1) + hf;
    }
  }
  throw InvalidArgument("weft has no Hugging Face name for the parameter " + name);
}

std::optional<std::string> weft_name(const std::string& hf) {
  for (const auto& [weft, hf_model] : kModelNames) {
    if (hf == hf_model) return weft;
  }
  if (hf.rfind("model.layers.", 0) != 0) return std::nullopt;
  const std::size_t dot = hf.find('.', 13);
  if (dot == std::string::npos) return std::nullopt;
  const std::string rest = hf.substr(dot + 1);
  for (const auto& [weft, hf_layer] : kLayerNames) {
    if (rest == hf_layer) return hf.substr(6, dot - 6 + 1) + weft;
  }
  return std::nullopt;
}

Tensor permute_rotary(const Tensor& weight, std::int64_t heads, bool to_hf) {
  const std::int64_t rows = weight.size(0), cols = weight.size(1);
  const std::int64_t head_dim = rows / heads, half = head_dim / 2;
  const Tensor in = weight.contiguous();
  Tensor out = Tensor::zeros(weight.shape());
  const float* src = in.data<float>();
  float* dst = out.data<float>();
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t i = 0; i < half; ++i) {
      for (std::int64_t j = 0; j < 2; ++j) {
        const std::int64_t meta = h * head_dim + 2 * i + j, hf = h * head_dim + j * half + i;
        const std::int64_t from = to_hf ? meta : hf, to = to_hf ? hf : meta;
        std::copy(src + from * cols, src + (from + 1) * cols, dst + to * cols);
      }
    }
  }
  return out;
}

namespace {

std::optional<std::int64_t> rotary_heads(const std::string& name, const nn::LlamaConfig& c) {
  if (name.ends_with("attention.wq.weight")) return c.n_heads;
  if (name.ends_with("attention.wk.weight")) return c.kv_heads();
  return std::nullopt;
}

}  // namespace

Tensor to_hf_layout(const std::string& name, const Tensor& weight, const nn::LlamaConfig& c) {
  const auto heads = rotary_heads(name, c);
  return heads ? permute_rotary(weight, *heads, true) : weight;
}

Tensor from_hf_layout(const std::string& name, const Tensor& weight, const nn::LlamaConfig& c) {
  const auto heads = rotary_heads(name, c);
  return heads ? permute_rotary(weight, *heads, false) : weight;
}

nlohmann::ordered_json hf_config(const nn::LlamaConfig& c, const std::string& dtype,
                                 std::optional<std::int32_t> bos, std::optional<std::int32_t> eos) {
  nlohmann::ordered_json j = {{"architectures", {"LlamaForCausalLM"}},
                              {"model_type", "llama"},
                              {"hidden_size", c.dim},
                              {"intermediate_size", c.hidden_dim()},
                              {"num_hidden_layers", c.n_layers},
                              {"num_attention_heads", c.n_heads},
                              {"num_key_value_heads", c.kv_heads()},
                              {"head_dim", c.dim / c.n_heads},
                              {"vocab_size", c.vocab_size},
                              {"max_position_embeddings", c.max_seq_len},
                              {"rms_norm_eps", c.norm_eps},
                              {"rope_theta", c.rope_theta},
                              {"rope_scaling", nullptr},
                              {"tie_word_embeddings", c.tie_embeddings},
                              {"hidden_act", "silu"},
                              {"attention_bias", false},
                              {"mlp_bias", false},
                              {"torch_dtype", dtype}};
  if (bos) j["bos_token_id"] = *bos;
  if (eos) j["eos_token_id"] = *eos;
  return j;
}

nn::LlamaConfig from_hf_config(const nlohmann::json& j, const std::string& path) {
  const std::string type = j.value("model_type", "");
  if (type != "llama") {
    throw ConfigError(path + ": model_type is \"" + type + "\"; weft reads Llama (\"llama\")");
  }
  if (j.value("hidden_act", "silu") != "silu") {
    throw ConfigError(path + ": hidden_act is " + j["hidden_act"].dump() +
                      "; weft's Llama uses silu");
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    if (j.value(bias, false))
      throw ConfigError(path + ": " + bias + " is true; weft's Llama has no biases");
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    throw ConfigError(path + ": rope_scaling " + j["rope_scaling"].dump() +
                      " (long-context RoPE, as Llama 3.1's) is not implemented in weft");
  }
  nn::LlamaConfig c;
  c.dim = field<std::int64_t>(j, "hidden_size", path);
  c.n_layers = field<std::int64_t>(j, "num_hidden_layers", path);
  c.n_heads = field<std::int64_t>(j, "num_attention_heads", path);
  c.n_kv_heads = j.value("num_key_value_heads", c.n_heads);
  c.vocab_size = field<std::int64_t>(j, "vocab_size", path);
  c.max_seq_len = j.value("max_position_embeddings", std::int64_t{2048});
  c.norm_eps = j.value("rms_norm_eps", 1e-6);
  c.rope_theta = j.value("rope_theta", 10000.0);
  c.tie_embeddings = j.value("tie_word_embeddings", false);
  if (j.contains("head_dim") && !j["head_dim"].is_null() &&
      j["head_dim"].get<std::int64_t>() * c.n_heads != c.dim) {
    throw ConfigError(path + ": head_dim " + j["head_dim"].dump() +
                      " is not hidden_size / num_attention_heads, which weft's attention needs");
  }
  // The feed-forward size as weft computes it: rounded up to a multiple of itself, after a
  // multiplier that brings Llama's 2/3 x 4 x dim down to it when it is smaller.
  const std::int64_t hidden = field<std::int64_t>(j, "intermediate_size", path);
  c.multiple_of = hidden;
  const std::int64_t base = 2 * (4 * c.dim) / 3;
  c.ffn_dim_multiplier =
      base > hidden ? static_cast<double>(hidden) / static_cast<double>(base) : 0;
  if (c.hidden_dim() != hidden) {
    throw ConfigError(path + ": intermediate_size " + std::to_string(hidden) +
                      " cannot be expressed as weft's feed-forward size");
  }
  try {
    c.validate();
  } catch (const InvalidArgument& e) {
    throw ConfigError(path + ": " + e.what());
  }
  return c;
}

void read_hf_model(const std::string& folder, const nn::LlamaConfig& model,
                   const std::function<void(const std::string&, const Tensor&)>& use) {
  const std::string config_path = (fs::path(folder) / "config.json").string();
  const nn::LlamaConfig hf = from_hf_config(read_json(config_path), config_path);
  if (const std::string diff = differences(model, hf); !diff.empty()) {
    throw ConfigError("checkpoint.initial_load_path = '" + folder +
                      "' holds another model than the run's: " + diff);
  }
  std::vector<std::string> files;
  const fs::path index = fs::path(folder) / "model.safetensors.index.json";
  if (fs::exists(index)) {
    std::set<std::string> named;
    const nlohmann::json map = read_json(index.string());
    if (!map.contains("weight_map") || !map["weight_map"].is_object()) {
      throw ConfigError(index.string() + " has no \"weight_map\" object");
    }
    for (const auto& [tensor, file] : map["weight_map"].items()) {
      named.insert(file.get<std::string>());
    }
    for (const std::string& f : named) files.push_back((fs::path(folder) / f).string());
  } else {
    files.push_back((fs::path(folder) / "model.safetensors").string());
  }
  const auto shapes = model.parameter_shapes();
  std::map<std::string, Shape> wanted(shapes.begin(), shapes.end());
  for (const std::string& file : files) {
    checkpoint::SafetensorsFile f;
    try {
      f = checkpoint::load_safetensors(file);
    } catch (const Error& e) {
      throw ConfigError(std::string("checkpoint.initial_load_path: ") + e.what());
    }
    for (const checkpoint::NamedTensor& t : f.tensors) {
      const std::optional<std::string> name = weft_name(t.name);
      if (!name) continue;  // rotary_emb.inv_freq and the like: computed, not learned
      const auto it = wanted.find(*name);
      if (it == wanted.end()) {
        throw ConfigError(file + " has " + t.name + ", which the run's model does not");
      }
      if (t.tensor.shape() != it->second) {
        throw ConfigError(file + ": " + t.name + " has shape " + shape_string(t.tensor.shape()) +
                          ", the run's model " + shape_string(it->second));
      }
      use(*name, from_hf_layout(*name, as_float32(t.tensor), model));
      wanted.erase(it);
    }
  }
  if (!wanted.empty()) {
    throw ConfigError("checkpoint.initial_load_path = '" + folder + "' lacks " +
                      hf_name(wanted.begin()->first) + " (and " +
                      std::to_string(wanted.size() - 1) + " more of the model's tensors)");
  }
}

}  // namespace weft::train
