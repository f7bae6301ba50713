#include "weft/estimate/step_time.h"

#include <algorithm>
#include <cmath>

#include "weft/base/error.h"
#include "weft/estimate/layout.h"

namespace weft::estimate {
namespace {

// A process group of the mesh: `size` ranks `stride` apart in the world, and whether some
// group of this shape has ranks on two hosts.
struct Group {
  int size = 1, stride = 1;
  bool spans_hosts = false;
};

// The groups of `size` ranks `stride` apart that tile `world` (those of a mesh dimension),
// with ranks_per_host a host (0: one host).
Group mesh_group(int size, int stride, int world, int ranks_per_host) {
  Group g{size, stride};
  if (ranks_per_host <= 0 || size <= 1) return g;
  for (int r = 0; r + stride < world && !g.spans_hosts; ++r) {
    const bool same_group = (r / stride) % size != size - 1;
    g.spans_hosts = same_group && r / ranks_per_host != (r + stride) / ranks_per_host;
  }
  return g;
}

// The machine's costs as this job sees them: compute slowed down where the host runs more
// ranks x threads than it has cores (against the share each rank had when measured).
struct Costs {
  const ComputeCosts& compute;
  const BackendCosts* network;  // null for one rank
  const Placement& placement;
  int world = 1;
  double slowdown = 1;
  std::int64_t operand = 4;  // bytes of a product's operands (Widths::operand)

  double product(ProductKind kind, std::int64_t rows, std::int64_t in, std::int64_t out) const {
    const double flops = 2.0 * static_cast<double>(rows * in) * static_cast<double>(out);
    const double bytes =
        static_cast<double>((rows * in + in * out) * operand + rows * out * kFloat);
    const double rate = compute.product_rate(kind, rows, in, out) * 1e9;
    return slowdown * std::max(flops / rate, bytes / (compute.bandwidth_gbs * 1e9));
  }
  double kernel(const char* name, double elements) const {
    return slowdown * compute.kernel_ns(name) * elements * 1e-9;
  }
  double copy(double bytes) const { return slowdown * 2 * bytes / (compute.bandwidth_gbs * 1e9); }
  // y += x over n floats: two read, one written.
  double add(double n) const { return slowdown * 3 * n * kFloat / (compute.bandwidth_gbs * 1e9); }
  Group group(int size, int stride) const {
    return mesh_group(size, stride, world, placement.ranks_per_host);
  }
  // sendrecv is one exchange between neighbours of the group, whatever its size.
  double collective(const char* op, Group g, double bytes) const {
    if (g.size <= 1) return 0;
    AlphaBeta link = network->op(op);
    if (placement.between_hosts && g.spans_hosts) {
      link.alpha_s = std::max(link.alpha_s, placement.between_hosts->alpha_s);
      link.beta_s_per_byte =
          std::max(link.beta_s_per_byte, placement.between_hosts->beta_s_per_byte);
    }
    return collective_seconds(op, link, g.size, bytes);
  }
};

// One forward and backward of a piece of the model on one micro-batch: compute split as a
// zero-bubble schedule splits it (the input's gradient, then the weights'), and the blocking
// collectives of each half.
struct Pass {
  double forward = 0, backward_input = 0, backward_weight = 0;
  double forward_comm = 0, backward_comm = 0;

  Pass& operator+=(const Pass& o) {
    forward += o.forward, backward_input += o.backward_input, backward_weight += o.backward_weight;
    forward_comm += o.forward_comm, backward_comm += o.backward_comm;
    return *this;
  }
};

// The shape of one forward on this rank.
struct Shape {
  Widths w;
  std::int64_t rows;       // sequences x this rank's positions
  std::int64_t sequences;  // of one forward
  std::int64_t seq;        // the whole sequence's positions
  int cp;
  bool ring;  // context parallelism exchanging keys and values around a ring
  Group tp_group, cp_group;
};

Pass block_pass(const Shape& s, const Costs& c, bool checkpointing) {
  const Widths& w = s.w;
  const std::int64_t R = s.rows, L = w.local_rows(R), D = w.dim, H = w.hidden;
  const std::int64_t A = w.heads * w.head_dim;
  const double pairs = static_cast<double>(s.seq) * static_cast<double>(s.seq + 1) / 2 / s.cp;
  const double units = static_cast<double>(s.sequences * w.heads * w.head_dim) * pairs;
  const auto products = [&](ProductKind k) {  // q|k|v, the output projection, w1|w3, w2
    return c.product(k, R, D, w.qkv()) + c.product(k, R, A, D) + c.product(k, R, D, 2 * H) +
           c.product(k, R, H, D);
  };
  // RoPE in mixed precision rounds the whole q|k|v row as it rotates q and k.
  const std::int64_t rope = R * (w.operand == 2 ? w.qkv() : (w.heads + w.kv_heads) * w.head_dim);
  Pass p;
  p.forward = products(ProductKind::kForward) + 2 * c.kernel("rmsnorm_forward", L * D) +
              2 * c.copy(L * D * kFloat) + c.kernel("rope_forward", rope) +
              c.kernel("attention_forward", units) + c.kernel("swiglu_forward", R * H);
  p.backward_input = products(ProductKind::kBackwardInput) +
                     2 * c.kernel("rmsnorm_backward", L * D) + c.kernel("rope_backward", rope) +
                     c.kernel("attention_backward", units) + c.kernel("swiglu_backward", R * H);
  if (w.operand == 2) {  // the attention's output, and the output projection's and w2's gradients
    p.forward += c.kernel("to_bfloat16", R * A);
    p.backward_input += c.kernel("to_bfloat16", 2 * R * D);
  }
  p.backward_weight = products(ProductKind::kBackwardWeight);
  // Tensor parallelism: each region's input gathered (sequence parallelism) and its partial
  // output reduce-scattered, or all-reduced; backward the same for the gradients.
  const Group tp = s.tp_group;
  const double rows_bytes = static_cast<double>(R * D * kFloat);
  if (w.sequence_sharded) {
    p.forward_comm = 2 * c.collective("all_gather", tp, static_cast<double>(R * D * w.operand)) +
                     2 * c.collective("reduce_scatter", tp, rows_bytes);
    p.backward_comm = 2 * c.collective("all_gather", tp, rows_bytes) +
                      2 * c.collective("reduce_scatter", tp, rows_bytes) +
                      c.collective("all_reduce", tp, 2.0 * D * kFloat);
  } else {
    p.forward_comm = 2 * c.collective("all_reduce", tp, rows_bytes);
    p.backward_comm = 2 * c.collective("all_reduce", tp, rows_bytes);
  }
  // Context parallelism: the keys and values around the ring (and their gradients back), or
  // all-gathered (and the gradients reduce-scattered).
  const double kv = static_cast<double>(R * 2 * w.kv_heads * w.head_dim);
  if (s.cp > 1 && s.ring) {
    p.forward_comm += (s.cp - 1) * c.collective("sendrecv", s.cp_group, kv * w.operand);
    p.backward_comm += (s.cp - 1) * (c.collective("sendrecv", s.cp_group, kv * w.operand) +
                                     c.collective("sendrecv", s.cp_group, kv * kFloat));
  } else if (s.cp > 1) {
    p.forward_comm += c.collective("all_gather", s.cp_group, s.cp * kv * w.operand);
    p.backward_comm += c.collective("all_gather", s.cp_group, s.cp * kv * w.operand) +
                       c.collective("reduce_scatter", s.cp_group, s.cp * kv * kFloat);
  }
  if (s.cp > 1) {
    // A rank's two query chunks meet 2 cp + 1 chunks of keys (their own and the earlier ones):
    // forward merges each result after the first into the chunk's output; backward adds each
    // pair's query and key-value gradients into the rank's, and packs the keys and values.
    const double chunk_pairs = 2.0 * s.cp + 1, chunk_rows = static_cast<double>(R) / 2;
    const double kv_width = 2.0 * static_cast<double>(w.kv_heads * w.head_dim);
    p.forward += c.add((chunk_pairs - 2) * chunk_rows * static_cast<double>(A)) +
                 c.copy(static_cast<double>(R) * kv_width * static_cast<double>(w.operand));
    p.backward_input += c.add(chunk_pairs * chunk_rows * (static_cast<double>(A) + kv_width)) +
                        c.copy(static_cast<double>(R) * kv_width * (w.operand + kFloat));
  }
  if (checkpointing) {  // backward runs the forward again first
    p.backward_input += p.forward;
    p.backward_comm += p.forward_comm;
  }
  return p;
}

// The final norm, the output layer and the loss.
Pass head_pass(const Shape& s, const Costs& c) {
  const Widths& w = s.w;
  const std::int64_t R = s.rows, L = w.local_rows(R), D = w.dim;
  const Group tp = s.tp_group;
  Pass p;
  p.forward = c.kernel("rmsnorm_forward", L * D) + c.product(ProductKind::kForward, R, D, w.vocab) +
              c.kernel("cross_entropy", R * w.vocab * (w.gathered_logits ? w.tp : 1));
  p.backward_input =
      c.kernel("rmsnorm_backward", L * D) + c.product(ProductKind::kBackwardInput, R, D, w.vocab);
  p.backward_weight = c.product(ProductKind::kBackwardWeight, R, D, w.vocab);
  if (w.sequence_sharded) {
    p.forward_comm = c.collective("all_gather", tp, static_cast<double>(R * D * w.operand));
    p.backward_comm = c.collective("reduce_scatter", tp, static_cast<double>(R * D * kFloat));
  } else if (w.tp > 1) {
    p.backward_comm = c.collective("all_reduce", tp, static_cast<double>(R * D * kFloat));
  }
  if (w.gathered_logits) {
    p.forward_comm +=
        c.collective("all_gather", tp, static_cast<double>(R * w.vocab * w.tp * kFloat));
  } else if (w.tp > 1) {  // loss parallelism: the rows' maxima and sums
    p.forward_comm += 2 * c.collective("all_reduce", tp, static_cast<double>(R * kFloat));
  }
  return p;
}

Pass embedding_pass(const Shape& s, const Costs& c) {
  const std::int64_t R = s.rows, D = s.w.dim;
  const Group tp = s.tp_group;
  Pass p;
  p.forward = c.kernel("embedding_forward", R * D);
  p.backward_weight = c.kernel("embedding_backward", R * D);
  const double bytes = static_cast<double>(R * D * kFloat);
  if (s.w.sequence_sharded) {
    p.forward_comm = c.collective("reduce_scatter", tp, bytes);
    p.backward_comm = c.collective("all_gather", tp, bytes);
  } else if (s.w.tp > 1) {
    p.forward_comm = c.collective("all_reduce", tp, bytes);
  }
  return p;
}

// One micro-batch through the layers of `stage` (and the embedding and head where it holds them).
Pass stage_pass(const Job& job, const Shape& s, const Costs& c, const nn::LayerRange& stage) {
  Pass p;
  if (stage.first == 0) p += embedding_pass(s, c);
  const Pass block = block_pass(s, c, job.activation_checkpointing);
  for (int l = stage.first; l < stage.last; ++l) p += block;
  if (stage.last == job.model.n_layers) p += head_pass(s, c);
  return p;
}

// Data parallelism's collectives over one step, and the optimizer's compute (with DDP's copies
// of the gradients), for a rank holding `params`.
struct DataParallel {
  double background = 0, optimizer = 0;
  // Of the collectives behind `background`, the share compute cannot hide: DDP's last
  // bucket, FSDP's first gather and last reduction.
  double never_hidden = 0;
};

DataParallel data_parallel(const Job& job, const Costs& c,
                           const std::vector<LocalParameter>& params) {
  const parallel::ParallelDims& d = job.options.dims;
  const double reduce = job.options.reduce_dtype == DType::kBFloat16 ? 2 : kFloat;
  const double gather = job.options.param_dtype == DType::kBFloat16 ? 2 : kFloat;
  const int shards = d.dp_shard * d.cp;
  std::vector<double> units(static_cast<std::size_t>(job.model.n_layers) + 1, 0);
  double numel = 0;
  for (const LocalParameter& p : params) {
    const double padded = static_cast<double>((p.rows + shards - 1) / shards * p.cols) * shards;
    units[static_cast<std::size_t>(p.unit)] += d.dp_shard > 1 ? padded : 0;
    numel += static_cast<double>(p.rows * p.cols);
  }
  DataParallel out;
  double local = numel;  // what the optimizer updates
  // The mesh is [pp, dp_replicate, dp_shard, cp, tp]: DDP's group (replicas x cp) and FSDP's
  // (dp_shard x cp) are tp apart, the replicas dp_shard x cp x tp apart.
  const Group shard = c.group(shards, d.tp), replicas = c.group(d.dp_replicate, shards * d.tp);
  double copies = 0;  // DDP's: each gradient into its bucket and the reduced bucket back
  if (d.dp_shard == 1) {
    const Group ddp = c.group(d.dp_replicate * d.cp, d.tp);
    if (ddp.size > 1) copies = 2 * c.copy(numel * kFloat);
    const double bytes = numel * reduce, bucket = static_cast<double>(job.options.bucket_bytes);
    const double full = std::floor(bytes / bucket), rest = bytes - full * bucket;
    out.background = full * c.collective("all_reduce", ddp, bucket) +
                     (rest > 0 ? c.collective("all_reduce", ddp, rest) : 0);
    out.never_hidden = 1 / std::max(1.0, full + (rest > 0 ? 1 : 0));
  } else {
    const parallel::ShardingMode mode = job.options.fsdp_mode;
    const bool full_shard = mode == parallel::ShardingMode::kFullShard;
    local = 0;
    const double held = static_cast<double>(
        std::count_if(units.begin(), units.end(), [](double u) { return u > 0; }));
    out.never_hidden = 2 / std::max(2.0, 2 * held);
    for (const double u : units) {
      if (u == 0) continue;
      local += u / shards;
      // full_shard gathers each unit for forward and again for backward (once a step under
      // pipelines, where units stay whole); zero1 and zero2 refresh the full copy after step().
      // Each unit is reduced once a step (under pipelines after its last micro-batch).
      const int gathers = full_shard ? (d.pp > 1 ? 1 : 2) : 1;
      out.background +=
          gathers * c.collective("all_gather", shard, u * (full_shard ? gather : kFloat)) +
          c.collective("reduce_scatter", shard, u * reduce);
      out.background += c.collective("all_reduce", replicas, u / shards * reduce);
    }
  }
  out.optimizer = c.kernel("adamw", local) + 2 * c.kernel("sum_squares", local) + copies;
  return out;
}

// The ranks of a world of `world` on one host.
int ranks_here(const Placement& p, int world) {
  return p.ranks_per_host > 0 ? std::min(p.ranks_per_host, world) : world;
}

// Compute relative to the machine's costs, measured with m = Machine::ranks ranks computing
// at once (each slowed by shared_slowdown against one alone): k ranks on a host share it
// between those two (linear in k up to m), and in proportion to the threads a rank computes
// with (measured with Machine::threads).
double slowdown(const Machine& m, const Placement& p, int world) {
  const int here = ranks_here(p, world);
  const double shared =
      m.ranks > 1 ? 1 + (m.shared_slowdown - 1) * (std::min(here, m.ranks) - 1) / (m.ranks - 1) : 1;
  const double threads_ratio = static_cast<double>(m.threads) / p.threads;
  return threads_ratio * shared / m.shared_slowdown;
}

// Beyond its cores a host's ranks share them: how many times more ranks x threads want a core
// than when the costs were measured (below 1 where the measurement was the more crowded).
double contention(const Machine& m, const Placement& p, int world) {
  const auto oversubscribed = [&](int ranks, int threads) {
    return std::max(1.0, static_cast<double>(ranks * threads) / m.cores);
  };
  return oversubscribed(ranks_here(p, world), p.threads) / oversubscribed(m.ranks, m.threads);
}

bool spare_core(const Machine& m, const Placement& p, int world) {
  return ranks_here(p, world) * p.threads < m.cores;
}

// Background collectives hide behind compute only with a core to run on, and never all.
double exposed(const DataParallel& dp, double compute, bool spare) {
  if (!spare) return dp.background;
  return std::max(dp.background * dp.never_hidden, dp.background - compute);
}

// The estimate with compute slowed `slowdown` times against the machine's costs.
StepEstimate estimate_at(const Job& job, const Machine& machine, const Placement& placement,
                         double slowdown) {
  const StageCut cut = cut_stages(job);
  const parallel::ParallelDims& d = job.options.dims;
  const int world = d.product();
  const Costs c{machine.compute(job.options.param_dtype),
                world > 1 ? &machine.backend(placement.backend) : nullptr,
                placement,
                world,
                slowdown,
                job.options.param_dtype == DType::kBFloat16 ? 2 : kFloat};
  const Shape shape{Widths(job.model, job.options),
                    cut.rows,
                    cut.sequences,
                    job.seq,
                    d.cp,
                    job.options.cp_exchange == nn::KeyValueExchange::kRing,
                    c.group(d.tp, 1),
                    c.group(d.cp, d.tp)};
  const int microbatches = d.pp > 1 ? cut.schedule.microbatches : 1;
  const bool spare = spare_core(machine, placement, world);
  StepEstimate out;
  std::vector<parallel::ActionCosts> action_costs;
  for (int rank = 0; rank < d.pp; ++rank) {
    const std::vector<nn::LayerRange> held = cut.held_by(rank);
    Pass pass;
    for (const nn::LayerRange& stage : held) pass += stage_pass(job, shape, c, stage);
    RankTime t;
    t.stage = rank;
    t.forward = microbatches * pass.forward;
    t.backward = microbatches * (pass.backward_input + pass.backward_weight);
    t.blocking = microbatches * (pass.forward_comm + pass.backward_comm);
    const DataParallel dp = data_parallel(
        job, c, local_parameters(cut.parameters, static_cast<int>(job.model.n_layers), held, d.tp));
    t.optimizer = dp.optimizer;
    t.background = dp.background;
    t.exposed = exposed(dp, t.forward + t.backward, spare);
    out.ranks.push_back(t);
    const double stages = static_cast<double>(held.size());
    parallel::ActionCosts a;
    a.forward = (pass.forward + pass.forward_comm) / stages;
    a.backward_input = (pass.backward_input + pass.backward_comm) / stages;
    a.backward_weight = pass.backward_weight / stages;
    action_costs.push_back(a);
  }
  if (d.pp > 1) {
    const double transfer =
        c.collective("sendrecv", c.group(d.pp, world / d.pp),
                     static_cast<double>(shape.w.local_rows(cut.rows) * shape.w.dim * kFloat));
    // The copies run on the ranks' cores: without one to spare, each F's send of its
    // activations and each backward's of its gradients take the rank's time too.
    for (std::size_t r = 0; r < action_costs.size(); ++r) {
      parallel::ActionCosts& a = action_costs[r];
      a.transfer_latency = transfer;
      if (spare) continue;
      a.forward += transfer;
      a.backward_input += transfer;
      out.ranks[r].blocking += 2.0 * transfer * microbatches *
                               static_cast<double>(cut.held_by(static_cast<int>(r)).size());
    }
    out.schedule = cut.schedule;
  } else {  // one forward and one backward: a pipeline of one rank and one micro-batch
    out.schedule = parallel::make_schedule(parallel::ScheduleKind::kGPipe, 1, 1, 1);
  }
  out.simulation = parallel::simulate(out.schedule, action_costs);
  if (d.pp > 1) {
    for (RankTime& t : out.ranks)
      t.pipeline_idle =
          std::max(0.0, out.simulation.makespan - (t.forward + t.backward + t.blocking));
  }
  for (const RankTime& t : out.ranks) out.seconds = std::max(out.seconds, t.step());
  out.tokens_per_second =
      static_cast<double>(job.batch * job.seq * d.data_parallel()) / out.seconds;
  return out;
}

}  // namespace

// On a host with more ranks x threads than cores, compute slows by the contention only while
// every rank wants a core: a pipeline rank waiting in the bubble leaves its core to the
// others. The host's demand is each rank's busy time (all but the bubble) times the
// contention, which the step cannot beat; so compute slows by the contention times the share
// of the step the ranks are busy at the full rate (at least 1: never faster than alone).
StepEstimate estimate_step_time(const Job& job, const Machine& machine,
                                const Placement& placement) {
  const int world = job.options.dims.product();
  const double base = slowdown(machine, placement, world);
  const double crowd = contention(machine, placement, world);
  if (crowd <= 1 || job.options.dims.pp == 1) {
    return estimate_at(job, machine, placement, base * crowd);
  }
  const StepEstimate alone = estimate_at(job, machine, placement, base);
  double busy = 0;
  for (const RankTime& t : alone.ranks) busy += t.step() - t.pipeline_idle;
  busy /= static_cast<double>(alone.ranks.size());
  const double effective = std::max(1.0, crowd * busy / alone.seconds);
  return estimate_at(job, machine, placement, base * effective);
}

}  // namespace weft::estimate
