#!/usr/bin/env bash
# What layout-invariant training costs: the debug config trained with `deterministic = "layout"`
# against the default order, in alternating rounds, as 1 process, DDP 2 and FSDP 2 (weftrun,
# shm; batch 4 per rank: the same global batch of 8), with 2 and 4 feature blocks (what tensor
# parallelism needs: 2 for TP 2, 4 for TP 2 and 4) as 1 process and TP 2 (sequence- and
# loss-parallel), and with 4 sequence blocks (what context parallelism 2 needs) as 1 process
# and CP 2.
# tokens/s over 20 timed steps after 2.
#
#   bench/train/deterministic.sh [ROUNDS]      (default 3; LAYOUTS="one cp2-seq4" picks rows)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
cmake --build build/release --target weft-train weftrun -- --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"

run() {  # mode layout: tokens/s
  local mode=$1 layout=$2 jsonl="$out/run.jsonl" blocks=1 sequence_blocks=1
  [[ $layout == *blocks2 && $mode == layout ]] && blocks=2
  [[ $layout == *blocks4 && $mode == layout ]] && blocks=4
  [[ $layout == *seq4 && $mode == layout ]] && sequence_blocks=4
  local train=(build/release/tools/weft-train --config configs/debug.toml --training.steps 22
    --checkpoint.enable false --validation.enable false --metrics.log_freq 1
    --metrics.jsonl_path "$jsonl" --training.deterministic "$mode"
    --training.deterministic_blocks "$blocks"
    --training.deterministic_sequence_blocks "$sequence_blocks")
  rm -f "$jsonl"
  case $layout in
    one) "${train[@]}" > "$out/log" 2>&1 ;;
    one-blocks2 | one-blocks4 | one-seq4) "${train[@]}" > "$out/log" 2>&1 ;;
    cp2-seq4) build/release/tools/weftrun --nproc-per-node 2 "${train[@]}" \
      --parallelism.context_parallel_degree 2 > "$out/log" 2>&1 ;;
    tp2-blocks2 | tp2-blocks4) build/release/tools/weftrun --nproc-per-node 2 "${train[@]}" \
      --parallelism.tensor_parallel_degree 2 > "$out/log" 2>&1 ;;
    ddp2) build/release/tools/weftrun --nproc-per-node 2 "${train[@]}" --training.batch_size 4 \
      > "$out/log" 2>&1 ;;
    fsdp2) build/release/tools/weftrun --nproc-per-node 2 "${train[@]}" --training.batch_size 4 \
      --parallelism.data_parallel_shard_degree 2 > "$out/log" 2>&1 ;;
  esac
  python3 bench/train/summarise.py "$jsonl" | cut -d' ' -f1
}

for round in $(seq "$rounds"); do
  for layout in ${LAYOUTS:-one ddp2 fsdp2 one-blocks2 tp2-blocks2 one-blocks4 tp2-blocks4 one-seq4 cp2-seq4}; do
    off=$(run off "$layout")
    invariant=$(run layout "$layout")
    echo "round $round $layout: off $off, layout $invariant tokens/s"
  done
done
