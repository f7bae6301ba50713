#!/usr/bin/env bash
# The Python bindings' cost per call: a 4-byte all_reduce from C++ (weft-bench) and from
# Python (call_overhead.py), same backend and rank count, one after the other.
#
#   bench/python/call_overhead.sh [RANKS] [BACKEND]      (after make test or make run)
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=${1:-2}
backend=${2:-shm}
build=build/release
cmake --build "$build" --target weft-bench weftrun weft_python -- --quiet
for round in 1 2 3; do
  "$build/tools/weftrun" --nproc-per-node "$ranks" --backend "$backend" \
    "$build/tools/weft-bench" all_reduce -b 4 -e 4 -n 100000 -w 1000 |
    awk -v r="$round" '$1 == "[0]" && $2 == "4" {print "c++ 4 B all_reduce, round " r ": " $7 " us"}'
  PYTHONPATH="$build/python" "$build/tools/weftrun" --nproc-per-node "$ranks" \
    --backend "$backend" /usr/bin/python3 bench/python/call_overhead.py 4 | sed -e 's/^\[0\] //'
done
