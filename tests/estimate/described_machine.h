// A machine described rather than measured, and the debug model, for the estimate's tests.
#pragma once

#include "weft/estimate/machine.h"
#include "weft/estimate/memory_estimate.h"

namespace weft::test {

using estimate::AlphaBeta;
using estimate::BackendCosts;
using estimate::ComputeCosts;
using estimate::Machine;

struct Figures {
  int cores = 2, ranks = 1;     // the host's, and the ranks measured at once
  double product_gflops = 100;  // every product, both precisions
  double bandwidth_gbs = 1e12;  // memory
  double kernel_ns = 0;         // every kernel, per element
  AlphaBeta link{10e-6, 1e-9};  // every collective on "shm"
};

inline Machine described_machine(const Figures& f) {
  Machine m;
  m.cpu = m.target = "test";
  m.cores = f.cores;
  m.ranks = f.ranks;
  for (ComputeCosts* c : {&m.float32, &m.bfloat16}) {
    c->product_gflops = f.product_gflops;
    c->bandwidth_gbs = f.bandwidth_gbs;
    c->set_product_rate(f.product_gflops);
    for (const auto& [name, per] : estimate::kernel_names()) c->ns[name] = f.kernel_ns;
  }
  BackendCosts shm;
  shm.ranks = 2;
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "sendrecv"})
    shm.ops[op] = f.link;
  m.backends["shm"] = shm;
  return m;
}

// configs/debug.toml's model: 4 blocks of width 256, 4 heads, bytes as tokens.
inline nn::LlamaConfig debug_model() {
  nn::LlamaConfig c;
  c.dim = 256;
  c.n_layers = 4;
  c.n_heads = 4;
  c.vocab_size = 256;
  c.multiple_of = 32;
  c.max_seq_len = 256;
  return c;
}

}  // namespace weft::test
