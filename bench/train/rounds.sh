#!/usr/bin/env bash
# Alternating rounds of the debug config's training speed: this tree's weft-train, optionally
# another checkout's (built with the release preset: an earlier commit, to compare), and
# PyTorch (Debian's python3-torch, the same model: bench/train/torch_train.py), at 1 and 2
# threads, and the same again on the AVX2 footing (WEFT_SIMD_TARGET=AVX2 against PyTorch's
# ATEN_CPU_CAPABILITY=avx2). Each run: 20 timed steps after 2 warm-up ones; one line per run.
#
#   bench/train/rounds.sh [ROUNDS] [OTHER_TREE]       (default 3 rounds, no other tree)
#   git worktree add /tmp/old a59a7bb && (cd /tmp/old && cmake --preset release &&
#     cmake --build build/release --target weft-train) && bench/train/rounds.sh 3 /tmp/old
#   NO_TORCH=1 NO_AVX2=1 bench/train/rounds.sh 5 /tmp/old      (weft against weft only)
set -euo pipefail
cd "$(dirname "$0")/../.."
here=$(pwd)
rounds=${1:-3}
other=${2:-}
cmake --build build/release --target weft-train -- --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//');" \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-default}"

weft() {  # tree threads [env...]: tokens/s and the kernels' target
  local tree=$1 threads=$2 jsonl="$out/run.jsonl"
  shift 2
  rm -f "$jsonl"
  (cd "$tree" && env "$@" build/release/tools/weft-train --config configs/debug.toml \
    --training.steps 22 --training.threads "$threads" --checkpoint.enable false \
    --validation.enable false --metrics.log_freq 1 --metrics.jsonl_path "$jsonl" > "$out/log" 2>&1)
  echo "$(python3 bench/train/summarise.py "$jsonl" | cut -d' ' -f1)" \
    "$(grep -o 'kernels: [A-Z0-9]*' "$out/log" | head -1 || true)"
}
torch() {  # threads [env...]: tokens/s
  local threads=$1
  shift
  env OPENBLAS_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads" OMP_WAIT_POLICY=PASSIVE "$@" \
    /usr/bin/python3 bench/train/torch_train.py 256 4 4 256 8 20 "$threads" | awk '/^torch/ {print $3}'
}

for round in $(seq "$rounds"); do
  for threads in 1 2; do
    # Alternate which weft goes first, so that neither always runs on a warmer machine.
    if [ -n "$other" ] && [ $((round % 2)) = 0 ]; then
      echo "round $round threads $threads other $(weft "$other" "$threads")"
    fi
    echo "round $round threads $threads weft  $(weft "$here" "$threads")"
    if [ -n "$other" ] && [ $((round % 2)) = 1 ]; then
      echo "round $round threads $threads other $(weft "$other" "$threads")"
    fi
    if [ -z "${NO_TORCH:-}" ]; then
      echo "round $round threads $threads torch $(torch "$threads")"
    fi
    if [ -z "${NO_AVX2:-}" ]; then
      echo "round $round threads $threads weft  $(weft "$here" "$threads" WEFT_SIMD_TARGET=AVX2)"
      if [ -z "${NO_TORCH:-}" ]; then
        echo "round $round threads $threads torch" \
          "$(torch "$threads" ATEN_CPU_CAPABILITY=avx2) (avx2)"
      fi
    fi
  done
done
