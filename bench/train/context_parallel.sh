#!/usr/bin/env bash
# Context parallelism against one rank on long sequences: the debug model (configs/debug.toml:
# dim 256, 4 layers, 4 heads) on one sequence per step of 1,024 to 8,192 tokens, 1 rank x 1
# thread against CP 2 (2 ranks x 1 thread, each holding half of the sequence) with keys and
# values around the ring and all-gathered. Per run: tokens/s over the timed steps, the largest
# rank's peak RSS, the activations rank 0 kept for backward, and the share of the step time
# rank 0 spent blocked in communication.
#
#   bench/train/context_parallel.sh [STEPS]           (default 3 timed steps, after 2 warm-up)
#   SEQS="8192" LAYOUTS="1x1 cp" bench/train/context_parallel.sh   (some; the first is the base)
#   FIT_MIB=1024 bench/train/context_parallel.sh fit  (the longest sequence each layout trains
#                                                      with every process's address space
#                                                      limited to FIT_MIB, by ulimit -v)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
cmake --build "$build" --target weft-train weftrun -- --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "cpu: $model, $(nproc) cores; kernels: WEFT_SIMD_TARGET=${WEFT_SIMD_TARGET:-best}"

# run LAYOUT SEQ STEPS: trains, leaves the log in $out/log and the metrics in $out/run.jsonl.
run() {
  local layout=$1 seq=$2 steps=$3 launch=() extra=()
  case $layout in
    1x1) ;;
    cp) launch=("$build/tools/weftrun" --nproc-per-node 2)
        extra=(--parallelism.context_parallel_degree 2) ;;
    cp-allgather) launch=("$build/tools/weftrun" --nproc-per-node 2)
        extra=(--parallelism.context_parallel_degree 2
               --parallelism.context_parallel_rotate_method allgather) ;;
    *) echo "unknown layout $layout" >&2; exit 2 ;;
  esac
  rm -f "$out/run.jsonl"
  "${launch[@]}" "$build/tools/weft-train" --config configs/debug.toml \
    --model.max_seq_len "$seq" --training.seq_len "$seq" --training.batch_size 1 \
    --training.steps "$steps" --training.threads 1 --checkpoint.enable false \
    --validation.enable false --metrics.log_freq 1 --metrics.jsonl_path "$out/run.jsonl" \
    "${extra[@]}" > "$out/log" 2>&1
}

if [ "${1:-}" = fit ]; then
  budget=${FIT_MIB:?FIT_MIB: the address-space limit per process, in MiB}
  printf "%-14s %s\n" layout "longest sequence trained (1 step) in $budget MiB per process"
  for layout in ${LAYOUTS:-1x1 cp}; do
    longest=none
    for seq in ${SEQS:-1024 2048 4096 8192 16384}; do
      if (ulimit -v $((budget * 1024)); run "$layout" "$seq" 1); then longest=$seq; else break; fi
    done
    printf "%-14s %s\n" "$layout" "$longest"
  done
  exit 0
fi

steps=${1:-3}
printf "%-6s %-14s %8s %7s %9s %12s %8s\n" seq layout "tok/s" "vs 1x1" "peak MiB" \
  "activ. MiB" "comm"
for seq in ${SEQS:-1024 2048 4096 8192}; do
  base=
  for layout in ${LAYOUTS:-1x1 cp cp-allgather}; do
    run "$layout" "$seq" $((steps + 2))
    read -r tps _ mem < <(python3 bench/train/summarise.py "$out/run.jsonl")
    activations=$(grep -o 'activations [0-9.]*' "$out/log" | awk '{print $2}' || true)
    comm=$(grep -o 'communication (rank 0): [0-9.]*%' "$out/log" | awk '{print $4}' || true)
    [ -z "$base" ] && base=$tps
    printf "%-6s %-14s %8s %7s %9s %12s %8s\n" "$seq" "$layout" "$tps" \
      "$(python3 -c "print(f'{$tps / $base:.2f}x')")" "$mem" "${activations:--}" "${comm:--}"
  done
done
