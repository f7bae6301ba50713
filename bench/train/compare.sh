#!/usr/bin/env bash
# weft-train against the same Llama in PyTorch (Debian's python3-torch), side by side on this
# machine: tokens/s, MFU and peak memory for the debug config (dim 256, 4 layers) and
# configs/llama_512.toml (dim 512, 8 layers), batch 8 x sequence 256, float32, AdamW, at 1 and
# 2 threads (OPENBLAS_NUM_THREADS pinned for both; OMP_WAIT_POLICY=PASSIVE for PyTorch), and
# data-parallel on 2 ranks x 1 thread (weftrun + DDP, and FSDP full_shard, over shm;
# torch.multiprocessing + DDP over gloo), batch 8 per rank. Memory: the largest rank's peak RSS.
#
#   bench/train/compare.sh [STEPS]      (default 20 timed steps per run; after make run/test)
#   DTYPE=bfloat16 bench/train/compare.sh   mixed precision: weft's mixed_precision_param
#                                           against PyTorch's bf16 autocast
#   CONFIGS=debug bench/train/compare.sh    the debug config alone (default: debug llama_512)
#
# The AVX2 path on any x86-64 machine, both sides on the same footing: weft's kernels through
# the dispatch (WEFT_SIMD_TARGET) and its products through oneDNN's (ONEDNN_MAX_CPU_ISA: the
# start-up line names the ISA oneDNN runs), PyTorch's through ATEN_CPU_CAPABILITY, both
# OpenBLASes on their Haswell kernels:
#   ONEDNN_MAX_CPU_ISA=AVX2 WEFT_SIMD_TARGET=AVX2 ATEN_CPU_CAPABILITY=avx2 \
#     OPENBLAS_CORETYPE=Haswell bench/train/compare.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
steps=${1:-20}
export DTYPE=${DTYPE:-float32}  # torch_train.py reads it too
cmake --build "$build" --target weft-train -- --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
have_torch=1
/usr/bin/python3 -c 'import torch' 2>/dev/null || have_torch=0
[ "$have_torch" = 1 ] || echo "compare: python3-torch missing for /usr/bin/python3: PyTorch left out" >&2

summarise() { python3 bench/train/summarise.py "$1"; }

model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "cpu: $model; DTYPE=$DTYPE WEFT_SIMD_TARGET=${WEFT_SIMD_TARGET:-best} ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-default} OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-default}"

printf "%-10s %7s %12s %8s %10s %12s %10s %8s\n" config threads "weft tok/s" "mfu" "weft MiB" "torch tok/s" "torch MiB" "ratio"
for cfg in ${CONFIGS:-debug llama_512}; do
  case $cfg in
    debug) dim=256 layers=4 heads=4 ;;
    llama_512) dim=512 layers=8 heads=8 ;;
  esac
  for threads in 1 2; do
    jsonl="$out/$cfg.$threads.jsonl"
    "$build/tools/weft-train" --config "configs/$cfg.toml" --training.steps $((steps + 2)) \
      --training.threads "$threads" --training.mixed_precision_param "$DTYPE" \
      --checkpoint.enable false --validation.enable false \
      --metrics.log_freq 1 --metrics.jsonl_path "$jsonl" > "$out/log"
    [ "$threads" = 1 ] && [ $cfg = debug ] && grep -o 'peak .*' "$out/log"
    read -r wtps wmfu wmem < <(summarise "$jsonl")
    ttps=- tmem=- ratio=-
    if [ "$have_torch" = 1 ]; then
      read -r _ _ ttps _ tmem _ _ < <(OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
        OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/train/torch_train.py \
        $dim $layers $heads 256 8 "$steps" "$threads")
      ratio=$(python3 -c "print(f'{$wtps / $ttps:.2f}x')")
    fi
    printf "%-10s %7s %12s %8s %10s %12s %10s %8s\n" $cfg $threads "$wtps" "$wmfu" "$wmem" "$ttps" "$tmem" "$ratio"
  done
  # 2 ranks x 1 thread, data parallel: DDP, then FSDP (full_shard), against PyTorch's DDP.
  ttps=- tmem=-
  if [ "$have_torch" = 1 ]; then
    read -r _ _ ttps _ tmem _ _ < <(OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE \
      /usr/bin/python3 bench/train/torch_train.py $dim $layers $heads 256 8 "$steps" 1 2 \
      2>/dev/null | grep '^torch')
  fi
  for layout in ddp fsdp; do
    jsonl="$out/$cfg.$layout.jsonl"
    extra=()
    [ $layout = fsdp ] && extra=(--parallelism.data_parallel_shard_degree 2 --parallelism.fsdp_mode full_shard)
    "$build/tools/weftrun" --nproc-per-node 2 "$build/tools/weft-train" --config "configs/$cfg.toml" \
      --training.steps $((steps + 2)) --training.mixed_precision_param "$DTYPE" \
      --checkpoint.enable false --validation.enable false --metrics.log_freq 1 --metrics.jsonl_path "$jsonl" "${extra[@]}" > "$out/log"
    read -r wtps wmfu wmem < <(summarise "$jsonl")
    ratio=-
    [ "$have_torch" = 1 ] && ratio=$(python3 -c "print(f'{$wtps / $ttps:.2f}x')")
    printf "%-10s %7s %12s %8s %10s %12s %10s %8s\n" $cfg "2x1 $layout" "$wtps" "$wmfu" "$wmem" "$ttps" "$tmem" "$ratio"
  done
done
