#!/usr/bin/env bash
# The auto backend (shm within a host, a network across, two-level collectives) against the
# flat backend on that network, on HOSTS network namespaces of PER_HOST ranks each
# (tests/dist/netns builds them; root and iproute2 needed): weft-bench OP (default
# all_reduce) from 4 B to 64 MiB on GROUP (all, the default; host: each host's ranks; cross:
# one rank per host; weft-bench --group), and the ratio of bus bandwidths (rank 0's
# group's). tcp and auto run under weftrun; where weft has MPI, mpi and auto over mpi run
# under mpirun too (tests/dist/netns/mpirun.sh; Open MPI told to yield while it waits, as the
# namespaces share this machine's few cores). With cross each group holds one rank per host,
# which auto runs flat on the network too: a control, not a comparison. The namespaces share
# this machine's CPUs and their links run at memory speed: what this shows is the two levels'
# saving in messages and copies, not a network's.
#
#   sudo bench/collectives/netns_compare.sh [HOSTS PER_HOST OP GROUP]  (defaults: 2 2 all_reduce all)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
hosts=${1:-2} per_host=${2:-2} op=${3:-all_reduce} group=${4:-all}
cmake --build "$build" --target weft-bench weftrun -- --quiet
bench_args=("$op" -b 4 -e 64M -f 4 --group "$group")
run() {  # backend -> "size time busbw" lines
  BENCH_OP=$op BENCH_ARGS="--group $group" tests/dist/netns/run.sh "$build/tools/weftrun" \
    "$build/tools/weft-bench" "$hosts" "$per_host" bench "$1" | sed -n -e 's/^\[0\] //p' |
    awk '$1 ~ /^[0-9]+$/ {print $1, $6, $8}'
}
run_mpi() {  # WEFT_BACKEND -> the same, under mpirun
  tests/dist/netns/mpirun.sh mpirun "$hosts" "$per_host" --tag-output \
    --mca mpi_yield_when_idle 1 -x WEFT_BACKEND="$1" -- "$build/tools/weft-bench" \
    "${bench_args[@]}" 2>/dev/null | sed -n -e 's/^\[1,0\]<stdout>://p' |
    awk '$1 ~ /^[0-9]+$/ {print $1, $6, $8}'
}
echo "$op on group $group, $hosts hosts x $per_host ranks (network namespaces): time (us) / busbw (GB/s)"
printf "%10s %22s %22s %10s\n" size tcp auto "auto/tcp bw"
# One job at a time: `join <(run a) <(run b)` would run both at once on the same cores.
flat=$(run tcp)
two_levels=$(run auto)
join <(echo "$flat") <(echo "$two_levels") |
  awk '{printf "%10d %12.2f / %6.3f %12.2f / %6.3f %10.2f\n", $1, $2, $3, $4, $5, ($3 > 0 ? $5 / $3 : 0)}'
grep -q "WEFT_HAVE_MPI:INTERNAL=ON" "$build/CMakeCache.txt" || exit 0
printf "%10s %22s %22s %10s\n" size mpi "auto over mpi" "auto/mpi bw"
flat=$(run_mpi mpi)
two_levels=$(run_mpi auto)
join <(echo "$flat") <(echo "$two_levels") |
  awk '{printf "%10d %12.2f / %6.3f %12.2f / %6.3f %10.2f\n", $1, $2, $3, $4, $5, ($3 > 0 ? $5 / $3 : 0)}'
