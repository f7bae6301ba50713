#include "weft/train/describe.h"

#include <cstdio>
#include <vector>

#include "weft/train/trainer.h"

namespace weft::train {

namespace {

std::string count(double n) {
  char text[32];
  if (n >= 1e9) {
    std::snprintf(text, sizeof(text), "%.2fB", n / 1e9);
  } else if (n >= 1e6) {
    std::snprintf(text, sizeof(text), "%.2fM", n / 1e6);
  } else {
    std::snprintf(text, sizeof(text), "%.0f", n);
  }
  return text;
}

// One line per tensor outside the layers, then one per tensor of a layer for all of them.
std::string parameters_of(const nn::LlamaConfig& m) {
  std::string out;
  auto line = [&](const std::string& name, const Shape& s, const char* each) {
    char text[200];
    std::snprintf(text, sizeof(text), "  %-44s %-16s %s%s\n", name.c_str(), shape_string(s).c_str(),
                  count(static_cast<double>(shape_numel(s))).c_str(), each);
    out += text;
  };
  const std::string layers = "layers.{0.." + std::to_string(m.n_layers - 1) + "}.";
  for (const auto& [name, shape] : m.parameter_shapes()) {
    if (name.rfind("layers.", 0) != 0) {
      line(name, shape, "");
    } else if (name.rfind("layers.0.", 0) == 0) {
      line(layers + name.substr(9), shape, " each");
    }
  }
  return out;
}

}  // namespace

std::string describe_job(const Config& c, int world_size) {
  const nn::LlamaConfig m = with_tokenizer_vocabulary(c).model;
  const ParallelismConfig& p = c.parallelism;
  const std::int64_t replicate = world_size > 0
                                     ? parallel_options(c, world_size).dims.dp_replicate
                                     : std::max<std::int64_t>(1, p.data_parallel_replicate_degree);
  const std::int64_t ranks = world_size > 0 ? world_size : configured_ranks(c);
  char head[512];
  std::snprintf(head, sizeof(head),
                "model: Llama, %s parameters (dim %lld, %lld layers, %lld heads, %lld key/value "
                "heads, feed-forward %lld, vocabulary %lld, rope theta %g), %.1f GFLOP per token "
                "at sequence length %lld\n"
                "mesh: dp_replicate %lld x dp_shard %lld x cp %lld x tp %lld x pp %lld = %lld "
                "rank%s%s; training.mixed_precision_param %s\n",
                count(static_cast<double>(m.parameter_count())).c_str(),
                static_cast<long long>(m.dim), static_cast<long long>(m.n_layers),
                static_cast<long long>(m.n_heads), static_cast<long long>(m.kv_heads()),
                static_cast<long long>(m.hidden_dim()), static_cast<long long>(m.vocab_size),
                m.rope_theta, m.flops_per_token(c.training.seq_len) / 1e9,
                static_cast<long long>(c.training.seq_len), static_cast<long long>(replicate),
                static_cast<long long>(p.data_parallel_shard_degree),
                static_cast<long long>(p.context_parallel_degree),
                static_cast<long long>(p.tensor_parallel_degree),
                static_cast<long long>(p.pipeline_parallel_degree), static_cast<long long>(ranks),
                ranks == 1 ? "" : "s",
                p.data_parallel_replicate_degree == -1 && world_size == 0
                    ? " (dp_replicate: the rest of the world)"
                    : "",
                c.training.mixed_precision_param.c_str());
  return head;
}

std::string describe(const Config& c) {
  const Config resolved = with_tokenizer_vocabulary(c);  // the tokenizer loaded once
  return describe_job(resolved, 0) + "parameters:\n" + parameters_of(resolved.model);
}

}  // namespace weft::train
