#!/usr/bin/env bash
# Runs, in one go on this machine, the same sweep (all_reduce, broadcast, all_gather and
# reduce_scatter of float32 with sum, 4 B to 64 MiB by x4, plus barrier) for weft's shm and
# thread backends (shm's all_reduce and broadcast also on SharedBuffers, which run in place),
# Open MPI (shared-memory transport: --mca btl self,vader) and
# torch.distributed's gloo (all_reduce, broadcast, all_gather, barrier), weft's mpi
# backend against the same raw Open MPI calls, and weft's tcp backend against Gloo's C++
# library over its tcp transport, both on loopback (all_reduce, broadcast, all_gather,
# reduce_scatter), with 2 and 4 ranks, and prints one table per op and rank count with the
# ratios to Open MPI and to Gloo.
#
#   bench/collectives/compare.sh            (after make test or make run built the tree)
#
# machine_limits.cc measures, in the same run, what bounds them: one thread's copy bandwidth
# and the round trip of a cache line between two CPUs (printed above the tables, and each
# large message's busbw against the copy bandwidth), and last the collective table's effect:
# the default algorithm thresholds against ones fitted on this machine in the same run.
#
# Peers come from Debian: openmpi-bin + libopenmpi-dev (mpicxx, mpirun), python3-torch (gloo),
# libgloo-dev (Gloo's C++ library). A missing peer is reported and left out of the table.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
cmake --build "$build" --target weft-bench weftrun -- --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

limits() {  # before|after
  if [ -x "$out/machine_limits" ]; then "$out/machine_limits" > "$out/limits.$1"; fi
}
"${CXX:-c++}" -O2 -std=c++17 -pthread bench/collectives/machine_limits.cc \
  -o "$out/machine_limits" || echo "compare: machine_limits did not build: left out" >&2
limits before
have_mpi=0
if command -v mpicxx >/dev/null && command -v mpirun >/dev/null; then
  mpicxx -O3 -std=c++17 bench/collectives/mpi_bench.cc -o "$out/mpi_bench" && have_mpi=1
else
  echo "compare: Open MPI not installed (apt-get install openmpi-bin libopenmpi-dev): left out" >&2
fi
have_gloo_cpp=0
if [ -f /usr/include/gloo/allreduce.h ]; then
  g++ -O3 -std=c++17 bench/collectives/gloo_cpp_bench.cc -o "$out/gloo_cpp_bench" -lgloo \
    -lpthread && have_gloo_cpp=1
else
  echo "compare: Gloo's C++ library not installed (apt-get install libgloo-dev): left out" >&2
fi
have_gloo=0
if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
  have_gloo=1
else
  echo "compare: torch not installed for /usr/bin/python3 (apt-get install python3-torch): left out" >&2
fi

# weft-bench lines -> "op size time_us busbw best_us p99_us"
weft_lines() {  # op
  sed -e 's/^\[[0-9]*\] //' | awk -v op="$1" '$1 ~ /^[0-9]+$/ {print op, $1, $6, $8, $10, $11}'
}

for n in 2 4; do
  for op in all_reduce broadcast all_gather reduce_scatter barrier; do
    "$build/tools/weft-bench" "$op" --threads "$n" -b 4 -e 64M -f 4 | weft_lines "$op" \
      > "$out/thread.$op.$n"
    "$build/tools/weftrun" --nproc-per-node "$n" --backend shm "$build/tools/weft-bench" "$op" \
      -b 4 -e 64M -f 4 | weft_lines "$op" > "$out/shm.$op.$n"
  done
  for op in all_reduce broadcast; do  # buffers in SharedBuffers: these two run in place
    "$build/tools/weftrun" --nproc-per-node "$n" --backend shm "$build/tools/weft-bench" "$op" \
      -b 4 -e 64M -f 4 --shared | weft_lines "$op" > "$out/shared.$op.$n"
  done
  if [ "$have_mpi" = 1 ]; then
    # One op a process, as weft-bench runs: Open MPI's reduce_scatter runs 10-30x faster
    # after other collectives in the same process than on its own.
    for op in all_reduce broadcast all_gather reduce_scatter barrier; do
      mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl self,vader \
        "$out/mpi_bench" "$op" >> "$out/mpi.$n"
    done
    for op in all_reduce broadcast all_gather reduce_scatter; do
      mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl self,vader \
        -x OPENBLAS_NUM_THREADS=1 "$build/tools/weft-bench" "$op" --backend mpi -b 4 -e 64M -f 4 \
        | weft_lines "$op" \
        > "$out/weftmpi.$op.$n"
    done
  fi
  for op in all_reduce broadcast all_gather reduce_scatter; do
    "$build/tools/weftrun" --nproc-per-node "$n" --backend tcp "$build/tools/weft-bench" "$op" \
      -b 4 -e 64M -f 4 | weft_lines "$op" > "$out/tcp.$op.$n"
  done
  if [ "$have_gloo_cpp" = 1 ]; then
    store=$(mktemp -d -p "$out")
    "$build/tools/weftrun" --nproc-per-node "$n" "$out/gloo_cpp_bench" "$store" all_reduce \
      broadcast all_gather reduce_scatter barrier | sed -e 's/^\[[0-9]*\] //' > "$out/gloocpp.$n"
  fi
  if [ "$have_gloo" = 1 ]; then
    /usr/bin/python3 bench/collectives/gloo_bench.py "$n" all_reduce broadcast all_gather \
      barrier 2>/dev/null > "$out/gloo.$n"
  fi
done
limits after
python3 bench/collectives/compare_table.py "$out"
# The defaults against a collective table fitted on this machine now (weft-bench --tune, written
# to the scratch folder: the user's own table is left alone).
for n in 2 4; do
  echo
  echo "shm, $n ranks: the default thresholds against this machine's table (weft-bench --tune)"
  "$build/tools/weftrun" --nproc-per-node "$n" --backend shm "$build/tools/weft-bench" --tune \
    --out "$out/shm.$n.table" | sed -e 's/^\[[0-9]*\] //' | grep -v '^# wrote'
done
