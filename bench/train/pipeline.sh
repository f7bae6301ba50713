#!/usr/bin/env bash
# Pipeline parallelism on 2 cores, on the same global batch, in one run: 1 rank x 1 thread,
# DDP on 2 ranks, and 2 pipeline stages under each schedule (GPipe, 1F1B, and with 2 stages per
# rank Interleaved1F1B, InterleavedZeroBubble and ZBVZeroBubble), 8 micro-batches of 1 sequence; for
# configs/llama_1024.toml (dim 1024, 8 layers, 16 heads) at a global batch of 8 x 256. Per run:
# tokens/s over the timed steps, the largest rank's peak RSS, the activations rank 0 kept at
# once, and each rank's idle share (rank 0 / rank 1): measured (1 - its compute time over the
# steps' makespan, from the first rank's start to the last rank's end) and simulated (the
# schedule with each rank's measured forward and backward times).
#
#   bench/train/pipeline.sh [STEPS]       (default 4 timed steps per run, after 2 warm-up)
#   CONFIGS=llama_512 LAYOUTS="1x1 1f1b" bench/train/pipeline.sh   (some; the first is the base)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
steps=${1:-4}
cmake --build "$build" --target weft-train weftrun -- --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "cpu: $model, $(nproc) cores; kernels: WEFT_SIMD_TARGET=${WEFT_SIMD_TARGET:-best}"
printf "%-10s %-26s %9s %7s %9s %11s %11s %11s\n" config layout "tok/s" "vs 1x1" "peak MiB" \
  "activ. MiB" "idle %" "simulated %"
for cfg in ${CONFIGS:-llama_1024}; do
  batch=8
  base=
  for layout in ${LAYOUTS:-1x1 ddp gpipe 1f1b interleaved interleaved-zb zbv}; do
    ranks=2 per_rank=$batch extra=()
    pp=(--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_microbatch_size 1)
    case $layout in
      1x1) ranks=1 ;;
      ddp) per_rank=$((batch / 2)) ;;
      gpipe) extra=("${pp[@]}" --parallelism.pipeline_parallel_schedule GPipe) ;;
      1f1b) extra=("${pp[@]}" --parallelism.pipeline_parallel_schedule 1F1B) ;;
      interleaved) extra=("${pp[@]}" --parallelism.pipeline_parallel_schedule Interleaved1F1B) ;;
      interleaved-zb) extra=("${pp[@]}" --parallelism.pipeline_parallel_schedule InterleavedZeroBubble) ;;
      zbv) extra=("${pp[@]}" --parallelism.pipeline_parallel_schedule ZBVZeroBubble) ;;
    esac
    jsonl="$out/$cfg.$layout.jsonl"
    launch=()
    [ $ranks = 2 ] && launch=("$build/tools/weftrun" --nproc-per-node 2)
    "${launch[@]}" "$build/tools/weft-train" --config "configs/$cfg.toml" \
      --training.steps $((steps + 2)) --training.threads 1 --training.batch_size $per_rank \
      --checkpoint.enable false --validation.enable false --metrics.log_freq 1 \
      --metrics.jsonl_path "$jsonl" "${extra[@]}" > "$out/log" 2>&1
    read -r tps _ mem < <(python3 bench/train/summarise.py "$jsonl")
    activations=$(grep -o 'activations [0-9.]*' "$out/log" | awk '{print $2}' || true)
    # "  rank 1 (pp rank 1): idle 4.8% (computed 9.10 of 9.56 s), simulated 4.5%", per rank
    idle=$(grep -o 'idle [0-9.]*%' "$out/log" | tr -d '%' | awk '{print $2}' | paste -sd/ || true)
    simulated=$(grep -o 'simulated [0-9.]*%$' "$out/log" | tr -d '%' | awk '{print $2}' |
      paste -sd/ || true)
    [ -z "$base" ] && base=$tps
    printf "%-10s %-26s %9s %7s %9s %11s %11s %11s\n" $cfg "$ranks x 1 $layout" "$tps" \
      "$(python3 -c "print(f'{$tps / $base:.2f}x')")" "$mem" "${activations:--}" "${idle:--}" \
      "${simulated:--}"
  done
done
