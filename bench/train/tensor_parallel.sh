#!/usr/bin/env bash
# Tensor parallelism against the other ways of using 2 cores, on the same global batch, in one
# run: 1 rank x 1 thread, 1 rank x 2 threads, and 2 ranks x 1 thread as DDP, FSDP (full_shard),
# TP 2 (sequence and loss parallel), TP 2 without sequence parallelism and TP 2 with the
# logits gathered; for configs/llama_512.toml (global batch 8 x 256) and configs/llama_1024.toml
# (dim 1024, 8 layers, 16 heads; global batch 4 x 256). Per run: tokens/s over the timed
# steps, the largest rank's peak RSS, the activations rank 0 kept, and the share of the step
# time rank 0 spent blocked in collectives.
#
#   bench/train/tensor_parallel.sh [STEPS]     (default 6 timed steps per run, after 2 warm-up)
#   CONFIGS=llama_512 LAYOUTS="1x1 tp" bench/train/tensor_parallel.sh   (some; the first is the base)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
steps=${1:-6}
cmake --build "$build" --target weft-train weftrun -- --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "cpu: $model, $(nproc) cores; kernels: WEFT_SIMD_TARGET=${WEFT_SIMD_TARGET:-best}"
printf "%-10s %-26s %10s %7s %9s %12s %8s %8s\n" config layout "tok/s" "vs 1x1" "peak MiB" \
  "activ. MiB" "comm" "mfu"
for cfg in ${CONFIGS:-llama_512 llama_1024}; do
  batch=$(grep -m1 '^batch_size' "configs/$cfg.toml" | sed 's/.*= *//')
  base=
  for layout in ${LAYOUTS:-1x1 1x2 ddp fsdp tp tp-no-sp tp-gathered}; do
    ranks=2 threads=1 per_rank=$((batch / 2)) extra=()
    case $layout in
      1x1) ranks=1 per_rank=$batch ;;
      1x2) ranks=1 threads=2 per_rank=$batch ;;
      fsdp) extra=(--parallelism.data_parallel_shard_degree 2) ;;
      tp) per_rank=$batch extra=(--parallelism.tensor_parallel_degree 2) ;;
      tp-no-sp) per_rank=$batch extra=(--parallelism.tensor_parallel_degree 2
                                       --parallelism.enable_sequence_parallel false) ;;
      tp-gathered) per_rank=$batch extra=(--parallelism.tensor_parallel_degree 2
                                          --parallelism.disable_loss_parallel true) ;;
    esac
    jsonl="$out/$cfg.$layout.jsonl"
    launch=()
    [ $ranks = 2 ] && launch=("$build/tools/weftrun" --nproc-per-node 2)
    "${launch[@]}" "$build/tools/weft-train" --config "configs/$cfg.toml" \
      --training.steps $((steps + 2)) --training.threads $threads --training.batch_size $per_rank \
      --checkpoint.enable false --validation.enable false --metrics.log_freq 1 \
      --metrics.jsonl_path "$jsonl" "${extra[@]}" > "$out/log" 2>&1
    read -r tps mfu mem < <(python3 bench/train/summarise.py "$jsonl")
    activations=$(grep -o 'activations [0-9.]*' "$out/log" | awk '{print $2}' || true)
    comm=$(grep -o 'communication (rank 0): [0-9.]*%' "$out/log" | awk '{print $4}' || true)
    [ -z "$base" ] && base=$tps
    printf "%-10s %-26s %10s %7s %9s %12s %8s %8s\n" $cfg "$ranks x $threads $layout" "$tps" \
      "$(python3 -c "print(f'{$tps / $base:.2f}x')")" "$mem" "${activations:--}" "${comm:--}" "$mfu"
  done
done
