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
# this machine's CPUs and, unless told otherwise, their links run at memory speed: that
# shows the two levels' saving in messages and copies. NETNS_LINK_RATE=1gbit gives each
# host's link that rate each way (tests/dist/netns/hosts.sh), so that the link is the
# bottleneck, as between real hosts; BENCH_SIZES replaces weft-bench's size options.
#
#   sudo bench/collectives/netns_compare.sh [HOSTS PER_HOST OP GROUP]  (defaults: 2 2 all_reduce all)
#   sudo NETNS_LINK_RATE=1gbit BENCH_SIZES="-b 1M -e 64M -f 4" bench/collectives/netns_compare.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
hosts=${1:-2} per_host=${2:-2} op=${3:-all_reduce} group=${4:-all}
cmake --build "$build" --target weft-bench weftrun -- --quiet
sizes=${BENCH_SIZES:--b 4 -e 64M -f 4}
# shellcheck disable=SC2206  # the sizes' options, word-split
bench_args=("$op" $sizes --group "$group")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# A job's whole output goes to a log, shown when the job fails; rank 0's table is read from it.
ran() {  # name status
  [ "$2" = 0 ] && return
  echo "netns_compare: the $1 job failed (exit $2):" >&2
  tail -40 "$out/$1.log" >&2
  exit 1
}
table() {  # name prefix -> "size time busbw" lines
  sed -n -e "s/^$2//p" "$out/$1.log" | awk '$1 ~ /^[0-9]+$/ {print $1, $6, $8}'
}
run() {  # backend, under one weftrun per namespace
  BENCH_OP=$op BENCH_SIZES=$sizes BENCH_ARGS="--group $group" tests/dist/netns/run.sh \
    "$build/tools/weftrun" "$build/tools/weft-bench" "$hosts" "$per_host" bench "$1" \
    > "$out/$1.log" 2>&1
  ran "$1" $?
  table "$1" '\[0\] '
}
run_mpi() {  # WEFT_BACKEND, under one mpirun (Open MPI's, from PATH)
  tests/dist/netns/mpirun.sh mpirun "$hosts" "$per_host" --tag-output \
    --mca mpi_yield_when_idle 1 -x WEFT_BACKEND="$1" -- "$build/tools/weft-bench" \
    "${bench_args[@]}" > "$out/mpirun-$1.log" 2>&1
  ran "mpirun-$1" $?
  table "mpirun-$1" '\[1,0\]<stdout>:'
}
# Rows side by side; the bandwidth ratio from the times (bus bandwidth is printed rounded).
side_by_side() {  # flat two_levels
  join <(echo "$1") <(echo "$2") |
    awk '{printf "%10d %12.2f / %6.3f %12.2f / %6.3f %10.2f\n", $1, $2, $3, $4, $5, $2 / $4}'
}
echo "$op on group $group, $hosts hosts x $per_host ranks (network namespaces): time (us) / busbw (GB/s)"
printf "%10s %22s %22s %10s\n" size tcp auto "auto/tcp bw"
# One job at a time: `join <(run a) <(run b)` would run both at once on the same cores.
set +e  # each job's status is checked by ran
flat=$(run tcp) || exit 1
two_levels=$(run auto) || exit 1
side_by_side "$flat" "$two_levels"
grep -q "WEFT_HAVE_MPI:INTERNAL=ON" "$build/CMakeCache.txt" || exit 0
printf "%10s %22s %22s %10s\n" size mpi "auto over mpi" "auto/mpi bw"
flat=$(run_mpi mpi) || exit 1
two_levels=$(run_mpi auto) || exit 1
side_by_side "$flat" "$two_levels"
