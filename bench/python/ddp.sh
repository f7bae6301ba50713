#!/usr/bin/env bash
# PyTorch DistributedDataParallel on the debug Llama (dim 256, 4 layers, 256 tokens x 8
# sequences per rank, 1 thread per rank, AdamW) over gloo and over weft, 2 processes,
# alternating, ROUNDS rounds; prints each run's tokens/s (bench/train/torch_train.py):
#
#   bench/python/ddp.sh [STEPS] [ROUNDS]      (after make test or make run)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
steps=${1:-20}
rounds=${2:-3}
cmake --build "$build" --target weft_python weft_torch -- --quiet
for round in $(seq "$rounds"); do
  for backend in gloo weft; do
    tps=$(PYTHONPATH="$build/python" OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
      OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/train/torch_train.py \
      256 4 4 256 8 "$steps" 1 2 "$backend" 2>/dev/null | awk '/^torch/ {print $3}')
    echo "round $round: DDP over $backend: $tps tokens/s"
  done
done
