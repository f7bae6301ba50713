// weft-train's configuration: TOML sections as TorchTitan's ([model], [training],
// [optimizer], [lr_scheduler], [checkpoint], [metrics], [validation], [parallelism], [comm]), every
// key with a type, a default and the values it allows. Any key can be overridden on the command
// line as
// `--section.key value`. An unknown key, a value of the wrong type or out of range is a
// ConfigError naming the key and what is allowed; nothing has been written then.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/base/error.h"
#include "weft/nn/llama.h"
#include "weft/nn/optim.h"

namespace weft::train {

class ConfigError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

struct TrainingConfig {
  std::int64_t batch_size = 8;  // sequences per micro-batch, on each data-parallel rank
  std::int64_t seq_len = 256;
  std::int64_t steps = 100;
  std::int64_t seed = 0;
  double max_norm = 1.0;  // gradient clipping by global norm; 0 disables it
  std::int64_t gradient_accumulation_steps = 1;
  std::string dataset_path = "data/tinyshakespeare.txt";
  double validation_fraction = 0.1;  // the end of the text, held out
  bool activation_checkpointing = false;
  std::int64_t threads = 1;  // cores this process computes with (weft's threads)
  // The matrix products' operand type: "float32", or "bfloat16" (mixed precision: bf16 copies
  // of weights and inputs, float32 accumulation and everything else float32).
  std::string mixed_precision_param = "float32";
  // The gradients' dtype in the data-parallel reductions (DDP, FSDP, HSDP): "float32" or
  // "bfloat16" (half the bytes on the wire; gradients stay float32 on each side).
  std::string mixed_precision_reduce = "float32";
  // A step whose loss or gradient norm is not finite: "stop" (an error naming the step,
  // before the optimizer step; nothing saved) or "skip" (no optimizer step; training goes on).
  std::string on_nonfinite = "stop";
  // "layout": the loss, gradients and parameters bitwise those of one process whatever the
  // data-parallel layout (DDP, FSDP, HSDP), pipeline, tensor parallelism (deterministic_blocks),
  // context parallelism (deterministic_sequence_blocks),
  // micro-batch count and thread count (docs/TRAINING.md); "off": each
  // layout sums in its own order (within parts per billion of one process).
  std::string deterministic = "off";
  // With deterministic = "layout": the fixed blocks each Linear's tensor-parallel dimension is
  // cut into (a power of two), so that any tensor_parallel_degree dividing it trains to the
  // same bits; runs compare bitwise at the same value. 1: whole products, no tensor parallelism.
  std::int64_t deterministic_blocks = 1;
  // With deterministic = "layout": the fixed blocks of positions each sequence is cut into (a
  // power of two dividing seq_len), each a leaf of the canonical tree, so that any
  // context_parallel_degree whose double divides it trains to the same bits; runs compare
  // bitwise at the same value. 1: whole sequences, no context parallelism.
  std::int64_t deterministic_sequence_blocks = 1;
};

struct CheckpointConfig {
  bool enable = false;
  std::string folder = "checkpoints";
  std::int64_t interval = 100;          // steps between checkpoints; the last step always saves
  bool resume = false;                  // continue from the newest checkpoint in `folder`
  std::int64_t keep_latest = 0;         // 0 keeps every checkpoint
  std::string async_mode = "disabled";  // TorchTitan's: disabled, async
  std::string initial_load_path;        // a Hugging Face folder the run starts from
  // In-place recovery of sharded layouts: steps between in-memory copies (docs/RECOVERY.md).
  std::int64_t buddy_interval = 1;
};

struct MetricsConfig {
  std::int64_t log_freq = 10;
  std::string jsonl_path;  // empty: no metrics file
  double peak_gflops = 0;  // 0: measured at start-up with a short sgemm
};

struct ValidationConfig {
  bool enable = true;
  std::int64_t freq = 50;  // steps between validations (and after the last step)
  std::int64_t steps = 4;  // global batches per validation
};

// TorchTitan's meaning: a replicate degree alone is DDP, a shard degree alone FSDP, both
// HSDP; a tensor-parallel degree splits each layer across that many ranks, and composes with
// any of them; a pipeline-parallel degree cuts the layers into stages on that many ranks
// (composing with tensor parallelism; with data parallelism not yet). The degrees' product must be
// the world size (checked when the job starts); -1 for the replicate degree means "the world size
// divided by the other degrees".
struct ParallelismConfig {
  std::int64_t data_parallel_replicate_degree = -1;
  std::int64_t data_parallel_shard_degree = 1;
  std::string fsdp_mode = "full_shard";  // full_shard (ZeRO-3), zero1, zero2
  double bucket_size_mb = 25;            // DDP's gradient buckets
  std::int64_t tensor_parallel_degree = 1;
  bool enable_sequence_parallel = true;  // with tensor parallelism
  bool disable_loss_parallel = false;    // with tensor parallelism
  std::int64_t pipeline_parallel_degree = 1;
  std::string pipeline_parallel_schedule = "1F1B";      // TorchTitan's names
  std::string pipeline_parallel_schedule_csv;           // a PyTorch CSV schedule file; overrides it
  std::int64_t pipeline_parallel_microbatch_size = 1;   // micro-batches = batch_size / this
  std::int64_t pipeline_parallel_layers_per_stage = 0;  // 0: 1 stage per rank, 2 interleaved
  std::int64_t context_parallel_degree = 1;             // ranks each sequence is split over
  std::string context_parallel_rotate_method = "alltoall";  // alltoall: the ring; allgather
  // A machine's costs (weft-bench machine): the layout weft-plan ranks first replaces the
  // degrees, schedule, FSDP mode, batch_size and activation checkpointing above.
  std::string auto_machine;
};

// TorchTitan's [comm]: how long a rank waits for the others.
struct CommConfig {
  double init_timeout_seconds = 300;   // joining the job (weftrun's rendezvous)
  double train_timeout_seconds = 100;  // every collective after it
  double rejoin_timeout_seconds = 30;  // one round of a recovery's rendezvous (in place, elastic)
};

// The tokenizer (docs/DATA.md): "bytes", a tokenizer.json, a SentencePiece .model or a
// tiktoken rank file (`encoding` names a rank file's pattern when its size does not).
struct TokenizerConfig {
  std::string path = "bytes";
  std::string encoding;
};

struct Config {
  nn::LlamaConfig model;
  TokenizerConfig tokenizer;
  TrainingConfig training;
  nn::AdamWOptions optimizer;
  nn::LrSchedule lr_scheduler;  // lr comes from [optimizer], total_steps from [training]
  CheckpointConfig checkpoint;
  MetricsConfig metrics;
  ValidationConfig validation;
  ParallelismConfig parallelism;
  CommConfig comm;
};

// "--section.key value" and "--section.key=value" pairs from a command line's arguments (what
// CLI11 leaves over), as load_config takes them; ConfigError for anything else.
std::vector<std::pair<std::string, std::string>> parse_overrides(
    const std::vector<std::string>& extras);

// Reads `path` (if not empty), then applies `overrides` ("section.key", "value" pairs, in
// order), then checks the whole: throws ConfigError.
Config load_config(const std::string& path,
                   const std::vector<std::pair<std::string, std::string>>& overrides);
// The same from TOML text (a checkpoint's); `what` names it in errors.
Config parse_config(const std::string& text, const std::string& what);
// The configuration as TOML text (what a checkpoint records).
std::string to_toml(const Config& config);

// One key of the configuration, as weft-train --help lists it. Everything comes from the
// table that parses and checks the keys, and the default from a default-constructed Config,
// so the help cannot drift from what a run does.
struct ConfigKey {
  std::string section;        // "training"
  std::string name;           // "training.steps", as --training.steps overrides it
  std::string type;           // INT, FLOAT, BOOL or TEXT
  std::string default_value;  // as TOML writes it: 100, 1e-05, false, 'checkpoints'
  std::string allowed;        // "at least 1", "0 to 0.5", "one of ..."; empty: any of its type
  std::string meaning;        // one line
};
// Every key, section by section, in the order of to_toml.
std::vector<ConfigKey> config_keys();
// The keys grouped under "[section]" headings: "--name TYPE=default", then the meaning and
// what is allowed from `column` on (on the next line when the name reaches it), wrapped
// between words to end before `width`.
std::string config_help(std::size_t column, std::size_t width);

}  // namespace weft::train
