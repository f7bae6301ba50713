#include "weft/train/config.h"

#include <cmath>
#include <functional>
#include <sstream>
#include <toml++/toml.h>
#include <variant>

namespace weft::train {
namespace {

using Target = std::variant<std::int64_t*, double*, bool*, std::string*>;

struct Field {
  const char* section;
  const char* key;
  Target (*get)(Config&);
  double min = -INFINITY;  // numbers: inclusive range
  double max = INFINITY;
  std::vector<std::string> allowed = {};  // strings: the values allowed (empty: any)
};

#define WEFT_FIELD(section, member, ...) \
  Field { #section, #member, [](Config& c) -> Target { return &c.section.member; }, __VA_ARGS__ }

const std::vector<Field>& fields() {
  static const std::vector<Field> all = {
      WEFT_FIELD(model, dim, 1), WEFT_FIELD(model, n_layers, 1), WEFT_FIELD(model, n_heads, 1),
      WEFT_FIELD(model, n_kv_heads, 0), WEFT_FIELD(model, vocab_size, 256),
      WEFT_FIELD(model, multiple_of, 1), WEFT_FIELD(model, max_seq_len, 1),
      WEFT_FIELD(model, rope_theta, 1e-9), WEFT_FIELD(model, norm_eps, 1e-12, 1.0),
      WEFT_FIELD(model, tie_embeddings),
      WEFT_FIELD(training, batch_size, 1), WEFT_FIELD(training, seq_len, 1),
      WEFT_FIELD(training, steps, 1), WEFT_FIELD(training, seed, 0),
      WEFT_FIELD(training, max_norm, 0), WEFT_FIELD(training, gradient_accumulation_steps, 1),
      WEFT_FIELD(training, dataset_path), WEFT_FIELD(training, validation_fraction, 0.0, 0.5),
      WEFT_FIELD(training, activation_checkpointing), WEFT_FIELD(training, threads, 1, 1024),
      WEFT_FIELD(optimizer, lr, 1e-12, 10.0), WEFT_FIELD(optimizer, weight_decay, 0.0, 10.0),
      WEFT_FIELD(optimizer, beta1, 0.0, 0.999999), WEFT_FIELD(optimizer, beta2, 0.0, 0.999999),
      WEFT_FIELD(optimizer, eps, 1e-30, 1.0),
      WEFT_FIELD(lr_scheduler, warmup_steps, 0),
      WEFT_FIELD(lr_scheduler, decay_type, -INFINITY, INFINITY, {"cosine", "linear", "constant"}),
      WEFT_FIELD(lr_scheduler, min_lr_ratio, 0.0, 1.0),
      WEFT_FIELD(checkpoint, enable), WEFT_FIELD(checkpoint, folder),
      WEFT_FIELD(checkpoint, interval, 1), WEFT_FIELD(checkpoint, resume),
      WEFT_FIELD(checkpoint, keep_latest, 0),
      WEFT_FIELD(metrics, log_freq, 1), WEFT_FIELD(metrics, jsonl_path),
      WEFT_FIELD(metrics, peak_gflops, 0),
      WEFT_FIELD(validation, enable), WEFT_FIELD(validation, freq, 1),
      WEFT_FIELD(validation, steps, 1),
      WEFT_FIELD(parallelism, data_parallel_replicate_degree, -1, 1 << 20),
      WEFT_FIELD(parallelism, data_parallel_shard_degree, 1, 1 << 20),
      WEFT_FIELD(parallelism, fsdp_mode, -INFINITY, INFINITY, {"full_shard", "zero1", "zero2"}),
      WEFT_FIELD(parallelism, bucket_size_mb, 0.001, 1 << 20),
  };
  return all;
}
#undef WEFT_FIELD

std::string name_of(const Field& f) { return std::string(f.section) + "." + f.key; }

const char* type_of(const Target& t) {
  switch (t.index()) {
    case 0: return "an integer";
    case 1: return "a number";
    case 2: return "true or false";
    default: return "a string";
  }
}

std::string keys_of(const std::string& section) {
  std::string keys;
  for (const Field& f : fields()) {
    if (section == f.section) keys += (keys.empty() ? "" : ", ") + std::string(f.key);
  }
  return keys;
}

const Field& find_field(const std::string& section, const std::string& key, const std::string& where) {
  bool known_section = false;
  for (const Field& f : fields()) {
    if (section != f.section) continue;
    known_section = true;
    if (key == f.key) return f;
  }
  if (!known_section) {
    throw ConfigError(where + "unknown section [" + section + "]; sections are model, training, "
                      "optimizer, lr_scheduler, checkpoint, metrics, validation, parallelism");
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
    throw ConfigError(where + name_of(f) + " = " + value + " is out of range: it must be " + allowed.str());
  };
  if (auto* i = std::get_if<std::int64_t*>(&t)) {
    if (static_cast<double>(**i) < f.min || static_cast<double>(**i) > f.max) out_of_range(std::to_string(**i));
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

std::string toml_type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date or time";
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

void set_from_string(const Field& f, Config& c, const std::string& value, const std::string& where) {
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
    c.model.validate();
  } catch (const InvalidArgument& e) {
    throw ConfigError(e.what());
  }
  if (c.parallelism.data_parallel_replicate_degree == 0) {
    throw ConfigError("parallelism.data_parallel_replicate_degree = 0 is out of range: use -1 "
                      "(the rest of the world size) or a positive degree");
  }
  if (c.validation.enable && c.training.validation_fraction == 0) {
    throw ConfigError("validation.enable = true needs a validation split: training.validation_fraction "
                      "is 0 (give it a fraction, or set validation.enable = false)");
  }
  if (c.training.seq_len > c.model.max_seq_len) {
    throw ConfigError("training.seq_len = " + std::to_string(c.training.seq_len) +
                      " exceeds model.max_seq_len = " + std::to_string(c.model.max_seq_len));
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
    out << f.key << " = ";
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, std::string>) {
            out << toml::value<std::string>(*p);
          } else if constexpr (std::is_same_v<T, bool>) {
            out << (*p ? "true" : "false");
          } else if constexpr (std::is_same_v<T, double>) {
            std::ostringstream v;
            v.precision(17);
            v << *p;
            std::string s = v.str();
            if (s.find_first_of(".eEin") == std::string::npos) s += ".0";
            out << s;
          } else {
            out << *p;
          }
        },
        f.get(c));
    out << "\n";
  }
  return out.str();
}

}  // namespace weft::train
