#!/usr/bin/env bash
# Data-parallel scaling on this machine, runs alternating so that drift hits all alike: one
# rank, DDP on 2 ranks and FSDP full_shard on 2 ranks, each 22 steps of CONFIG (1 thread per
# rank, batch 8 per rank), tokens/s over steps 3-22.
#
#   bench/train/scaling.sh [CONFIG] [RUNS]     (default: debug 3; after make run or make test)
set -euo pipefail
cd "$(dirname "$0")/../.."
cfg=${1:-debug}
runs=${2:-3}
tools=build/release/tools
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--config "configs/$cfg.toml" --training.steps 22 --checkpoint.enable false
        --validation.enable false --metrics.log_freq 1)
tps() { python3 bench/train/summarise.py "$1" | cut -d" " -f1; }
printf "%-4s %10s %10s %10s %9s %12s\n" run "1 rank" "DDP 2" "FSDP 2" scaling "FSDP/DDP"
for i in $(seq "$runs"); do
  "$tools/weft-train" "${common[@]}" --metrics.jsonl_path "$out/one.$i" > /dev/null
  "$tools/weftrun" --nproc-per-node 2 "$tools/weft-train" "${common[@]}" \
    --metrics.jsonl_path "$out/ddp.$i" > /dev/null
  "$tools/weftrun" --nproc-per-node 2 "$tools/weft-train" "${common[@]}" \
    --parallelism.data_parallel_shard_degree 2 --parallelism.fsdp_mode full_shard \
    --metrics.jsonl_path "$out/fsdp.$i" > /dev/null
  one=$(tps "$out/one.$i") ddp=$(tps "$out/ddp.$i") fsdp=$(tps "$out/fsdp.$i")
  printf "%-4s %10s %10s %10s %8s%% %11s%%\n" "$i" "$one" "$ddp" "$fsdp" \
    "$((100 * ddp / (2 * one)))" "$((100 * fsdp / ddp))"
done
