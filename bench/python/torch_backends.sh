#!/usr/bin/env bash
# weft against gloo through torch.distributed (bench/python/torch_backends.py), at 2 and 4
# processes, on this host (weft's shm backend):
#
#   bench/python/torch_backends.sh [MAX_BYTES]      (after make test or make run)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
cmake --build "$build" --target weftrun weft_python weft_torch -- --quiet
for ranks in 2 4; do
  PYTHONPATH="$build/python" "$build/tools/weftrun" --nproc-per-node "$ranks" \
    /usr/bin/python3 bench/python/torch_backends.py "${1:-67108864}" | sed -e 's/^\[0\] //'
done
