#!/usr/bin/env bash
# Point-to-point on one host: weft's shm transport against Open MPI's (vader), 2 ranks, each
# sending to the next and receiving from the previous (weft-bench sendrecv: an isend and a
# blocking recv; MPI_Sendrecv), 4 B to 64 MiB; median, best and 99th percentile in
# microseconds of 1,000 calls up to 256 KiB and 100 above, ROUNDS alternating rounds
# (default 2).
#
#   bench/collectives/p2p.sh [ROUNDS]     (after make run or make test)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
rounds=${1:-2}
cmake --build "$build" --target weft-bench weftrun -- --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
have_mpi=0
if command -v mpicxx >/dev/null && command -v mpirun >/dev/null; then
  mpicxx -O3 -std=c++17 bench/collectives/mpi_bench.cc -o "$out/mpi_bench" && have_mpi=1
else
  echo "p2p: Open MPI not installed (apt-get install openmpi-bin libopenmpi-dev): left out" >&2
fi
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs"
printf "%-6s %10s %30s %30s\n" round bytes "weft shm median/best/p99" "Open MPI median/best/p99"
for round in $(seq "$rounds"); do
  for sweep in "-b 4 -e 256K -n 1000" "-b 1M -e 64M -n 100"; do
    # shellcheck disable=SC2086  # the sweep's words
    "$build/tools/weftrun" --nproc-per-node 2 --backend shm "$build/tools/weft-bench" sendrecv \
      $sweep -f 4 | sed -e 's/^\[[0-9]*\] //' | awk '$1 ~ /^[0-9]+$/ {print $1, $6, $10, $11}'
  done > "$out/weft"
  : > "$out/mpi"
  if [ "$have_mpi" = 1 ]; then
    mpi=(mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader "$out/mpi_bench")
    {
      "${mpi[@]}" -n 1000 -e 262144 sendrecv | awk '{print $2, $3, $5, $6}'
      "${mpi[@]}" -n 100 sendrecv | awk '$2 >= 1048576 {print $2, $3, $5, $6}'
    } > "$out/mpi"
  fi
  awk -v round="$round" 'NR == FNR {mpi[$1] = $2 "/" $3 "/" $4; next}
    {printf "%-6s %10s %30s %30s\n", round, $1, $2 "/" $3 "/" $4, ($1 in mpi ? mpi[$1] : "-")}' \
    "$out/mpi" "$out/weft"
done
