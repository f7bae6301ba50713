#include "weft/train/config.h"

#include <toml++/toml.h>

#include <charconv>
#include <cmath>
#include <functional>
#include <iterator>
#include <sstream>
#include <variant>

namespace weft::train {
namespace {

using Target = std::variant<std::int64_t*, double*, bool*, std::string*>;

struct Field {
  const char* section;
  const char* key;
  const char* meaning;  // one line for --help
  Target (*get)(Config&);
  double min = -INFINITY;  // numbers: inclusive range
  double max = INFINITY;
  std::vector<std::string> allowed = {};  // strings: the values allowed (empty: any)
};

// Kept by hand: clang-format splits the stringizing #s from their names.
// clang-format off
#define WEFT_FIELD(section, member, meaning, ...) \
  Field { #section, #member, meaning, [](Config& c) -> Target { return &c.section.member; }, \
          __VA_ARGS__ }
// clang-format on

// One entry per key, in the order of to_toml and --help. The defaults are the structs'.
const std::vector<Field>& fields() {
  static const std::vector<Field> all = {
      WEFT_FIELD(model, dim, "model width: the embeddings and the residual stream", 1),
      WEFT_FIELD(model, n_layers, "transformer blocks", 1),
      WEFT_FIELD(model, n_heads, "attention heads; the head size dim/n_heads must be even", 1),
      WEFT_FIELD(model, n_kv_heads,
                 "key/value heads (grouped-query attention), dividing n_heads; 0: n_heads", 0),
      WEFT_FIELD(model, vocab_size,
                 "output classes: at least the tokenizer's vocabulary; 0: exactly the "
                 "tokenizer's (256 for bytes)",
                 0),
      WEFT_FIELD(model, multiple_of,
                 "the feed-forward hidden size (2/3 of 4*dim) is rounded up to a multiple of this",
                 1),
      WEFT_FIELD(model, ffn_dim_multiplier,
                 "scales the feed-forward hidden size before the rounding (Llama 3: 1.3 for 8B "
                 "and 70B, 1.2 for 405B); 0: none",
                 0.0, 100.0),
      WEFT_FIELD(model, max_seq_len,
                 "the longest sequence the model takes: training.seq_len, or prompt and generation",
                 1),
      WEFT_FIELD(model, rope_theta,
                 "RoPE's base: pair i of a head turns by position*rope_theta^(-2i/head_size)",
                 1e-9),
      WEFT_FIELD(model, norm_eps, "added to the mean square in RMSNorm", 1e-12, 1.0),
      WEFT_FIELD(model, tie_embeddings,
                 "the output layer reuses tok_embeddings.weight instead of a matrix of its own"),
      WEFT_FIELD(tokenizer, path,
                 "bytes (token = byte), a tokenizer.json, a SentencePiece .model or a tiktoken "
                 "rank file (docs/DATA.md)"),
      WEFT_FIELD(tokenizer, encoding,
                 "a tiktoken rank file's encoding (llama3, cl100k_base, o200k_base, r50k_base); "
                 "empty: by its rank count"),
      WEFT_FIELD(training, batch_size, "sequences per micro-batch on each data-parallel rank", 1),
      WEFT_FIELD(training, seq_len, "tokens per sequence; at most model.max_seq_len", 1),
      WEFT_FIELD(training, steps, "optimizer steps to train; the schedule spans them", 1),
      WEFT_FIELD(training, seed, "seeds the initial weights and the order of the batches", 0),
      WEFT_FIELD(training, max_norm,
                 "clips the gradients to this global L2 norm; 0: no clipping (still logged)", 0),
      WEFT_FIELD(training, gradient_accumulation_steps,
                 "micro-batches whose gradients are summed into each optimizer step", 1),
      WEFT_FIELD(training, dataset_path,
                 "a text file (tokenized at start-up), or a folder of token shards that "
                 "weft-data tokenize wrote (docs/DATA.md)"),
      WEFT_FIELD(training, validation_fraction,
                 "the end of a text file held out for validation (token shards have their own "
                 "split); 0 needs validation.enable = false",
                 0.0, 0.5),
      WEFT_FIELD(training, activation_checkpointing,
                 "keep only each block's input and run its forward again in backward (less "
                 "memory)"),
      WEFT_FIELD(training, threads,
                 "cores this process computes with (weft's threads; each matrix product runs on "
                 "one)",
                 1, 1024),
      WEFT_FIELD(training, mixed_precision_param,
                 "the operand type of the matrix products: bfloat16 (bf16 weights and inputs, "
                 "float32 accumulation; the norms and SwiGLU write bf16 for the products; "
                 "weights, gradients, optimizer state, the residual stream and every reduction "
                 "stay float32) or float32",
                 -INFINITY, INFINITY, {"float32", "bfloat16"}),
      WEFT_FIELD(training, mixed_precision_reduce,
                 "the gradients' dtype in the data-parallel reductions (DDP's all-reduce, FSDP's "
                 "reduce-scatter, HSDP's all-reduce): float32, or bfloat16 (half the bytes "
                 "on the mpi backend; shm, tcp and auto sum 16-bit floats in float32 copies, so "
                 "there it saves nothing; gradients stay float32 on each side)",
                 -INFINITY, INFINITY, {"float32", "bfloat16"}),
      WEFT_FIELD(training, on_nonfinite,
                 "a step whose loss or gradient norm is NaN or infinite: stop (an error naming "
                 "the step, before the optimizer step; nothing saved) or skip (no optimizer step)",
                 -INFINITY, INFINITY, {"stop", "skip"}),
      WEFT_FIELD(training, deterministic,
                 "layout: every sum over tokens in one canonical tree, so that the loss, "
                 "gradients and parameters are bitwise those of one process on any data-parallel "
                 "degree, micro-batch count and thread count (one process, DDP, FSDP, HSDP, "
                 "pipelines; tensor parallelism with deterministic_blocks; context parallelism "
                 "with deterministic_sequence_blocks); off: each layout's "
                 "own order",
                 -INFINITY, INFINITY, {"off", "layout"}),
      WEFT_FIELD(training, deterministic_blocks,
                 "with deterministic = \"layout\": the fixed feature blocks each weight's "
                 "tensor-parallel dimension is cut into, a power of two that "
                 "tensor_parallel_degree divides (runs are bitwise equal at the same value; "
                 "more blocks cost more); 1: whole products, no tensor parallelism",
                 1, 64),
      WEFT_FIELD(training, deterministic_sequence_blocks,
                 "with deterministic = \"layout\": the fixed blocks of positions each sequence "
                 "is cut into, a power of two dividing seq_len and a multiple of twice "
                 "context_parallel_degree (runs are bitwise equal at the same value; more blocks "
                 "cost more); 1: whole sequences, no context parallelism",
                 1, 1024),
      WEFT_FIELD(optimizer, lr, "AdamW's learning rate, reached at the end of the warm-up", 1e-12,
                 10.0),
      WEFT_FIELD(optimizer, weight_decay,
                 "AdamW's decoupled weight decay, p -= lr*weight_decay*p, on every parameter", 0.0,
                 10.0),
      WEFT_FIELD(optimizer, beta1, "AdamW's decay of the gradients' running mean", 0.0, 0.999999),
      WEFT_FIELD(optimizer, beta2, "AdamW's decay of the squared gradients' running mean", 0.0,
                 0.999999),
      WEFT_FIELD(optimizer, eps, "AdamW's epsilon, added to sqrt(v) in the update's denominator",
                 1e-30, 1.0),
      WEFT_FIELD(lr_scheduler, warmup_steps,
                 "steps of linear warm-up, step s (from 0) at lr*(s+1)/warmup_steps; 0: none", 0),
      WEFT_FIELD(lr_scheduler, decay_type,
                 "how the learning rate falls after the warm-up, from lr towards lr*min_lr_ratio",
                 -INFINITY, INFINITY, {"cosine", "linear", "constant"}),
      WEFT_FIELD(lr_scheduler, min_lr_ratio,
                 "the floor of the decay, as a fraction of optimizer.lr", 0.0, 1.0),
      WEFT_FIELD(checkpoint, enable,
                 "save checkpoints every checkpoint.interval steps and at the last step"),
      WEFT_FIELD(checkpoint, folder,
                 "where checkpoints go: <folder>/step-00000100/, a manifest.json and one "
                 "safetensors file per rank that writes (docs/CHECKPOINTS.md)"),
      WEFT_FIELD(checkpoint, interval, "steps between checkpoints; the last step always saves", 1),
      WEFT_FIELD(checkpoint, resume,
                 "continue from the newest checkpoint in checkpoint.folder, if there is one"),
      WEFT_FIELD(checkpoint, keep_latest,
                 "checkpoints kept, older ones removed once a newer one is complete; 0: all", 0),
      WEFT_FIELD(checkpoint, buddy_interval,
                 "in-place recovery of sharded layouts (weftrun --recover in-place): every this "
                 "many steps each rank copies the state it holds into its memory and the next "
                 "rank's, so that a dead rank's is rebuilt from its neighbour's; 0: no copies "
                 "(those layouts restart from the newest checkpoint instead)",
                 0),
      WEFT_FIELD(checkpoint, async_mode,
                 "async: the saving step copies its state and training continues while a "
                 "background thread writes it; disabled: the step waits for the write",
                 -INFINITY, INFINITY, {"disabled", "async"}),
      WEFT_FIELD(checkpoint, initial_load_path,
                 "a Hugging Face folder (config.json and safetensors) whose weights the run "
                 "starts from instead of the random init, unless it resumes (fine-tuning; "
                 "docs/CHECKPOINTS.md); empty: none"),
      WEFT_FIELD(metrics, log_freq, "steps between logged steps; the last step is always logged",
                 1),
      WEFT_FIELD(metrics, jsonl_path,
                 "also append each step and validation to this file as JSON lines; empty: none"),
      WEFT_FIELD(metrics, peak_gflops,
                 "one rank's peak GFLOP/s, for the MFU; 0: measured at start-up with an sgemm", 0),
      WEFT_FIELD(validation, enable,
                 "compute the validation loss every validation.freq steps and at the last step"),
      WEFT_FIELD(validation, freq, "steps between validations", 1),
      WEFT_FIELD(validation, steps, "global batches each validation averages over", 1),
      WEFT_FIELD(
          parallelism, data_parallel_replicate_degree,
          "replicas: DDP, or HSDP with a shard degree; -1: the world size over the shard degree",
          -1, 1 << 20),
      WEFT_FIELD(parallelism, data_parallel_shard_degree,
                 "ranks FSDP shards the state over (see fsdp_mode); 1: no FSDP", 1, 1 << 20),
      WEFT_FIELD(parallelism, fsdp_mode,
                 "what FSDP shards: everything (full_shard, ZeRO-3), gradients and moments "
                 "(zero2), or moments (zero1)",
                 -INFINITY, INFINITY, {"full_shard", "zero1", "zero2"}),
      WEFT_FIELD(parallelism, bucket_size_mb,
                 "DDP's gradient buckets in MiB, each all-reduced once backward has filled it",
                 0.001, 1 << 20),
      WEFT_FIELD(parallelism, tensor_parallel_degree,
                 "ranks each layer's matrices are split over (Megatron-style tensor "
                 "parallelism); 1: none",
                 1, 1 << 20),
      WEFT_FIELD(parallelism, enable_sequence_parallel,
                 "with tensor parallelism, shard the norms and the residual stream along the "
                 "sequence (activations 1/tp per rank)"),
      WEFT_FIELD(parallelism, disable_loss_parallel,
                 "with tensor parallelism, gather the whole logits for the loss instead of "
                 "computing it on vocabulary shards"),
      WEFT_FIELD(parallelism, pipeline_parallel_degree,
                 "ranks the layers are cut into pipeline stages over; 1: none", 1, 1 << 20),
      WEFT_FIELD(parallelism, pipeline_parallel_schedule,
                 "the order each pipeline rank runs its micro-batches' forwards and backwards "
                 "in (PyTorch's schedules; the zero-bubble ones split each backward in two)",
                 -INFINITY, INFINITY,
                 {"GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble"}),
      WEFT_FIELD(parallelism, pipeline_parallel_schedule_csv,
                 "a schedule in PyTorch's CSV format (one row of actions per rank) to run "
                 "instead; empty: none"),
      WEFT_FIELD(parallelism, pipeline_parallel_microbatch_size,
                 "sequences per pipeline micro-batch: training.batch_size / this micro-batches "
                 "stream through the stages",
                 1, 1 << 20),
      WEFT_FIELD(parallelism, pipeline_parallel_layers_per_stage,
                 "layers in each pipeline stage; 0: one stage per rank (two for the "
                 "interleaved and V schedules), the layers split as evenly as possible",
                 0, 1 << 20),
      WEFT_FIELD(parallelism, context_parallel_degree,
                 "ranks each sequence is split over (ring attention; each rank holds 2 of "
                 "2 x degree chunks); 1: none",
                 1, 1 << 20),
      WEFT_FIELD(parallelism, context_parallel_rotate_method,
                 "how context parallelism moves keys and values: alltoall, around the ring one "
                 "block per step, overlapped with attention; allgather, all at once before it",
                 -INFINITY, INFINITY, {"alltoall", "allgather"}),
      WEFT_FIELD(parallelism, auto_machine,
                 "a machine's measured costs (weft-bench machine --out FILE): train with the "
                 "layout weft-plan ranks first for this many ranks, at the same global batch, "
                 "in place of the degrees, schedule, fsdp_mode, batch_size and "
                 "activation_checkpointing given; empty: as given"),
      WEFT_FIELD(comm, init_timeout_seconds,
                 "seconds a rank waits for the others to join the job (weftrun's rendezvous)", 1.0,
                 86400.0),
      WEFT_FIELD(comm, train_timeout_seconds,
                 "seconds any collective waits for the other ranks once the job has started; a "
                 "rank that waits longer fails naming the rank it waited for",
                 1.0, 86400.0),
      WEFT_FIELD(comm, rejoin_timeout_seconds,
                 "recovery without a restart (weftrun --recover in-place or elastic): seconds "
                 "the ranks wait for each other in one round of forming the job again (a round "
                 "one of them died in is left for the next, three at most); an elastic job's new "
                 "process waits this plus comm.train_timeout_seconds to be admitted",
                 1.0, 86400.0),
  };
  return all;
}
#undef WEFT_FIELD

std::string name_of(const Field& f) { return std::string(f.section) + "." + f.key; }

// The type as --help names it, in CLI11's words; in the order of Target's alternatives.
const char* type_label(const Target& t) {
  static constexpr const char* kLabels[] = {"INT", "FLOAT", "BOOL", "TEXT"};
  static_assert(std::size(kLabels) == std::variant_size_v<Target>);
  return kLabels[t.index()];
}

const char* type_of(const Target& t) {
  switch (t.index()) {
    case 0:
      return "an integer";
    case 1:
      return "a number";
    case 2:
      return "true or false";
    default:
      return "a string";
  }
}

std::string keys_of(const std::string& section) {
  std::string keys;
  for (const Field& f : fields()) {
    if (section == f.section) keys += (keys.empty() ? "" : ", ") + std::string(f.key);
  }
  return keys;
}

const Field& find_field(const std::string& section, const std::string& key,
                        const std::string& where) {
  bool known_section = false;
  for (const Field& f : fields()) {
    if (section != f.section) continue;
    known_section = true;
    if (key == f.key) return f;
  }
  if (!known_section) {
    throw ConfigError(
        where + "unknown section [" + section +
        "]; sections are model, tokenizer, training, "
        "optimizer, lr_scheduler, checkpoint, metrics, validation, parallelism, comm");
  }
  throw ConfigError(where + "unknown key " + section + "." + key + "; [" + section +
                    "] has: " + keys_of(section));
}

[[noreturn]] void wrong_type(const Field& f, const Target& t, const std::string& where,
                             const std::string& got) {
  throw ConfigError(where + name_of(f) + " must be " + type_of(t) + ", got " + got);
}

// Checks the range (numbers) or the allowed values (strings) of a field already set.
void check_value(const Field& f, Config& c, const std::string& where) {
  const Target t = f.get(c);
  auto out_of_range = [&](const std::string& value) {
    std::ostringstream allowed;
    if (std::isfinite(f.min) && std::isfinite(f.max)) {
      allowed << "between " << f.min << " and " << f.max;
    } else {
      allowed << "at least " << f.min;
    }
    throw ConfigError(where + name_of(f) + " = " + value + " is out of range: it must be " +
                      allowed.str());
  };
  if (auto* i = std::get_if<std::int64_t*>(&t)) {
    if (static_cast<double>(**i) < f.min || static_cast<double>(**i) > f.max)
      out_of_range(std::to_string(**i));
  } else if (auto* d = std::get_if<double*>(&t)) {
    if (!std::isfinite(**d) || **d < f.min || **d > f.max) {
      std::ostringstream v;
      v << **d;
      out_of_range(v.str());
    }
  } else if (auto* s = std::get_if<std::string*>(&t); s && !f.allowed.empty()) {
    std::string list;
    for (const auto& a : f.allowed) {
      if (**s == a) return;
      list += (list.empty() ? "" : ", ") + a;
    }
    throw ConfigError(where + name_of(f) + " = '" + **s + "' is not allowed; use one of: " + list);
  }
}

// The shortest text that reads back as `v` (1e-05, 0.1, 1048576).
std::string shortest(double v) {
  char text[32];
  const auto result = std::to_chars(text, text + sizeof(text), v);
  return std::string(text, result.ptr);
}

// A value as TOML writes it. Floats get `precision` significant digits, or with 0 the shortest
// text that reads back the same, and always a fraction or exponent (else TOML reads an integer).
std::string toml_value(const Target& t, int precision) {
  return std::visit(
      [&](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        std::ostringstream out;
        if constexpr (std::is_same_v<T, std::string>) {
          out << toml::value<std::string>(*p);
        } else if constexpr (std::is_same_v<T, bool>) {
          out << (*p ? "true" : "false");
        } else if constexpr (std::is_same_v<T, double>) {
          if (precision > 0) {
            out.precision(precision);
            out << *p;
          } else {
            out << shortest(*p);
          }
          const std::string s = out.str();
          return s.find_first_of(".eEin") == std::string::npos ? s + ".0" : s;
        } else {
          out << *p;
        }
        return out.str();
      },
      t);
}

// What check_value lets through, for --help; empty when any value of the type does.
std::string allowed_of(const Field& f, const Target& t) {
  if (!f.allowed.empty()) {
    std::string list;
    for (const auto& a : f.allowed) list += (list.empty() ? "one of " : ", ") + a;
    return list;
  }
  if (std::holds_alternative<bool*>(t) || std::holds_alternative<std::string*>(t)) return "";
  if (!std::isfinite(f.min)) return "";
  if (!std::isfinite(f.max)) return "at least " + shortest(f.min);
  return shortest(f.min) + " to " + shortest(f.max);
}

// `words` from column `column` on, with a line break instead of a space where the next word
// would reach `width` (a word longer than the room stays whole); the lines after the first
// indented to `column`.
std::string wrapped(const std::vector<std::string>& words, std::size_t column, std::size_t width) {
  std::ostringstream out;
  std::size_t at = column;
  for (const std::string& word : words) {
    if (at > column && at + 1 + word.size() >= width) {
      out << "\n" << std::string(column, ' ');
      at = column;
    } else if (at > column) {
      out << ' ';
      ++at;
    }
    out << word;
    at += word.size();
  }
  return out.str();
}

// The meaning's words, then what is allowed as one (it reads badly cut).
std::vector<std::string> words_of(const ConfigKey& k) {
  std::istringstream meaning(k.meaning);
  std::vector<std::string> words;
  for (std::string word; meaning >> word;) words.push_back(word);
  if (!k.allowed.empty()) words.push_back("(" + k.allowed + ")");
  return words;
}

std::string toml_type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a number";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date or time";
  }
}

void set_from_toml(const Field& f, Config& c, const toml::node& node, const std::string& where) {
  const Target t = f.get(c);
  const std::string got = toml_type_name(node);
  if (auto* i = std::get_if<std::int64_t*>(&t)) {
    const auto v = node.value_exact<std::int64_t>();
    if (!v) wrong_type(f, t, where, got);
    **i = *v;
  } else if (auto* d = std::get_if<double*>(&t)) {
    const auto v = node.value<double>();  // integers are accepted as numbers
    if (!v || node.is_boolean()) wrong_type(f, t, where, got);
    **d = *v;
  } else if (auto* b = std::get_if<bool*>(&t)) {
    const auto v = node.value_exact<bool>();
    if (!v) wrong_type(f, t, where, got);
    **b = *v;
  } else {
    const auto v = node.value_exact<std::string>();
    if (!v) wrong_type(f, t, where, got);
    *std::get<std::string*>(t) = *v;
  }
  check_value(f, c, where);
}

void set_from_string(const Field& f, Config& c, const std::string& value,
                     const std::string& where) {
  const Target t = f.get(c);
  try {
    std::size_t used = 0;
    if (auto* i = std::get_if<std::int64_t*>(&t)) {
      **i = std::stoll(value, &used);
      if (used != value.size()) throw std::invalid_argument(value);
    } else if (auto* d = std::get_if<double*>(&t)) {
      **d = std::stod(value, &used);
      if (used != value.size()) throw std::invalid_argument(value);
    } else if (auto* b = std::get_if<bool*>(&t)) {
      if (value != "true" && value != "false") throw std::invalid_argument(value);
      **b = value == "true";
    } else {
      *std::get<std::string*>(t) = value;
    }
  } catch (const std::logic_error&) {
    wrong_type(f, t, where, "'" + value + "'");
  }
  check_value(f, c, where);
}

void check_whole(const Config& c) {
  try {
    nn::LlamaConfig model = c.model;
    if (model.vocab_size == 0) model.vocab_size = 1;  // 0: the tokenizer's, known once loaded
    model.validate();
  } catch (const InvalidArgument& e) {
    throw ConfigError(e.what());
  }
  if (c.parallelism.data_parallel_replicate_degree == 0) {
    throw ConfigError(
        "parallelism.data_parallel_replicate_degree = 0 is out of range: use -1 "
        "(the rest of the world size) or a positive degree");
  }
  try {
    c.model.validate_tensor_parallel(c.parallelism.tensor_parallel_degree);
  } catch (const InvalidArgument& e) {
    throw ConfigError(std::string("parallelism.") + e.what());
  }
  if (c.parallelism.pipeline_parallel_degree > 1 &&
      c.training.batch_size % c.parallelism.pipeline_parallel_microbatch_size != 0) {
    throw ConfigError("training.batch_size = " + std::to_string(c.training.batch_size) +
                      " is not a multiple of parallelism.pipeline_parallel_microbatch_size = " +
                      std::to_string(c.parallelism.pipeline_parallel_microbatch_size) +
                      ": the pipeline streams whole micro-batches");
  }
  const std::int64_t chunks = 2 * c.parallelism.context_parallel_degree;
  if (c.parallelism.context_parallel_degree > 1 && c.training.seq_len % chunks != 0) {
    throw ConfigError("training.seq_len = " + std::to_string(c.training.seq_len) +
                      " does not split into 2 x parallelism.context_parallel_degree = " +
                      std::to_string(chunks) + " equal chunks (context parallelism)");
  }
  if (c.validation.enable && c.training.validation_fraction == 0) {
    throw ConfigError(
        "validation.enable = true needs a validation split: training.validation_fraction "
        "is 0 (give it a fraction, or set validation.enable = false)");
  }
  if (c.training.seq_len > c.model.max_seq_len) {
    throw ConfigError("training.seq_len = " + std::to_string(c.training.seq_len) +
                      " exceeds model.max_seq_len = " + std::to_string(c.model.max_seq_len));
  }
  if (c.training.seq_len % c.training.deterministic_sequence_blocks != 0) {
    throw ConfigError("training.deterministic_sequence_blocks = " +
                      std::to_string(c.training.deterministic_sequence_blocks) +
                      " does not divide training.seq_len = " + std::to_string(c.training.seq_len) +
                      " (each sequence is cut into that many equal blocks of positions)");
  }
}

}  // namespace

namespace {

void apply_table(Config& c, const toml::table& root, const std::string& where) {
  for (const auto& [section, node] : root) {
    const auto* table = node.as_table();
    if (table == nullptr) {
      throw ConfigError(where + "'" + std::string(section.str()) + "' must be a [section]");
    }
    for (const auto& [key, value] : *table) {
      const Field& f = find_field(std::string(section.str()), std::string(key.str()), where);
      set_from_toml(f, c, value, where);
    }
  }
}

[[noreturn]] void parse_failed(const std::string& what, const toml::parse_error& e) {
  std::ostringstream msg;
  msg << what << ": " << e.description() << " (line " << e.source().begin.line << ", column "
      << e.source().begin.column << ")";
  throw ConfigError(msg.str());
}

void finish(Config& c) {
  c.lr_scheduler.lr = c.optimizer.lr;
  c.lr_scheduler.total_steps = c.training.steps;
  check_whole(c);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> parse_overrides(
    const std::vector<std::string>& extras) {
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t i = 0; i < extras.size(); ++i) {
    const std::string& arg = extras[i];
    if (arg.rfind("--", 0) != 0 || arg.size() < 3) {
      throw ConfigError("unexpected argument '" + arg + "'; overrides are --section.key value");
    }
    const auto eq = arg.find('=');
    if (eq != std::string::npos) {
      out.emplace_back(arg.substr(2, eq - 2), arg.substr(eq + 1));
    } else if (i + 1 < extras.size()) {
      out.emplace_back(arg.substr(2), extras[++i]);
    } else {
      throw ConfigError(arg + " needs a value");
    }
  }
  return out;
}

Config load_config(const std::string& path,
                   const std::vector<std::pair<std::string, std::string>>& overrides) {
  Config c;
  if (!path.empty()) {
    toml::table root;
    try {
      root = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      parse_failed("config " + path, e);
    }
    apply_table(c, root, "config " + path + ": ");
  }
  for (const auto& [name, value] : overrides) {
    const auto dot = name.find('.');
    const std::string where = "--" + name + ": ";
    if (dot == std::string::npos) {
      throw ConfigError(where + "overrides are --section.key value, e.g. --training.steps 100");
    }
    set_from_string(find_field(name.substr(0, dot), name.substr(dot + 1), where), c, value, where);
  }
  finish(c);
  return c;
}

Config parse_config(const std::string& text, const std::string& what) {
  Config c;
  toml::table root;
  try {
    root = toml::parse(text);
  } catch (const toml::parse_error& e) {
    parse_failed(what, e);
  }
  apply_table(c, root, what + ": ");
  finish(c);
  return c;
}

std::string to_toml(const Config& config) {
  Config c = config;
  std::ostringstream out;
  std::string section;
  for (const Field& f : fields()) {
    if (section != f.section) {
      section = f.section;
      out << (out.tellp() > 0 ? "\n" : "") << "[" << section << "]\n";
    }
    out << f.key << " = " << toml_value(f.get(c), 17) << "\n";
  }
  return out.str();
}

std::vector<ConfigKey> config_keys() {
  Config defaults;
  std::vector<ConfigKey> keys;
  for (const Field& f : fields()) {
    const Target t = f.get(defaults);
    keys.push_back(
        {f.section, name_of(f), type_label(t), toml_value(t, 0), allowed_of(f, t), f.meaning});
  }
  return keys;
}

// A stream rather than string sums: GCC 12 at -O3 warns (-Wrestrict) about those falsely.
std::string config_help(std::size_t column, std::size_t width) {
  std::ostringstream out;
  std::string section;
  for (const ConfigKey& k : config_keys()) {
    if (k.section != section) {
      section = k.section;
      out << (out.tellp() > 0 ? "\n[" : "[") << section << "]\n";
    }
    // As CLI11 lays out its options: the meaning on the next line when the name is too long.
    const std::string name = "  --" + k.name + " " + k.type + "=" + k.default_value;
    out << name;
    if (name.size() < column) {
      out << std::string(column - name.size(), ' ');
    } else {
      out << "\n" << std::string(column, ' ');
    }
    out << wrapped(words_of(k), column, width) << "\n";
  }
  return out.str();
}

}  // namespace weft::train
