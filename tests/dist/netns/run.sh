#!/usr/bin/env bash
# Several hosts, for real: NODES network namespaces (each a "host" with its own address,
# 10.77.0.<i+1>, on a bridge in a switch namespace of its own, so no traffic leaves them),
# one weftrun per namespace (--nnodes NODES --node-rank i, the master in the first), and
#   collectives   every collective checked by dist_worker on the tcp backend, PER_NODE ranks
#                 per host;
#   killed        a rank of the last host killed during a stream of all-reduces: every
#                 surviving rank must fail with a PeerError naming the dead rank, soon;
#   bench         weft-bench all_reduce, 4 B to 64 MiB, on the job (PROGRAM is weft-bench;
#                 bench/collectives/netns_compare.sh runs it for auto and tcp; $BENCH_OP and
#                 $BENCH_ARGS change the operation and add options, $BENCH_SIZES replaces
#                 the sizes' options); prints the first host's output, and a failing
#                 host's; fails if any host does;
#   recover       PROGRAM is weft-train, a small model under weftrun --recover $RECOVER
#                 (in-place unless set): a rank of the last host is killed once the job
#                 trains; every host must finish, rank 0 must say it recovered, and no
#                 weftrun may have failed to record the death in the first host's store;
#   linkdown      the last host's link taken down during a stream of all-reduces with a 4 s
#                 operation timeout: no FIN or RST ever comes, yet every rank on the other
#                 hosts must fail with a PeerError naming a rank of that host within the
#                 timeout plus 2 s (plus a second for weftrun to stop).
# The namespaces are removed however the script ends. Needs root (ip netns); exits 77, which
# ctest counts as skipped, without it.
#
#   run.sh WEFTRUN PROGRAM NODES PER_NODE MODE [BACKEND]     (BACKEND: tcp unless given)
set -uo pipefail
weftrun=$1 program=$2 nodes=$3 per_node=$4 mode=$5 backend=${6:-tcp}
# NETNS_IPV6=1: the job forms over the hosts' IPv6 addresses (the master at fd77::1).
master=10.77.0.1
[ "${NETNS_IPV6:-0}" = 1 ] && master=fd77::1
extra_env=()
# The auto backend must run the world group in two levels when hosts have several ranks.
[ "$backend" = auto ] && [ "$per_node" -gt 1 ] &&
  extra_env=("WEFT_EXPECT_WORLD_ENGINE=hierarchical(shm, generic)")
# auto is the default across hosts: its runs name no backend, which tests that default too.
backend_option=(--backend "$backend")
if [ "$backend" = auto ]; then
  backend_option=()
  extra_env+=(WEFT_EXPECT_BACKEND=auto)
fi
source "$(dirname "$0")/hosts.sh"
out=$(mktemp -d)
trap 'remove_hosts; rm -rf "$out"' EXIT
make_hosts "$nodes"

# One weftrun per host. Each way of finding the address other hosts reach this one at: the
# first host names it (WEFT_HOST), the second its interface (WEFT_SOCKET_IFNAME), the others
# neither (the route to the master).
start_node() {  # i, program args...
  local i=$1
  shift
  local where=()
  [ "$i" = 0 ] && where=(WEFT_HOST="$master")
  [ "$i" = 1 ] && where=(WEFT_SOCKET_IFNAME="${tag}a1")
  ip netns exec "${tag}n$i" env WEFT_JOB_TOKEN=netns-test-token "${where[@]}" "${extra_env[@]}" \
    timeout 120 "$weftrun" --nnodes "$nodes" --node-rank "$i" --nproc-per-node "$per_node" \
    --master-addr "$master" --master-port 29517 "${backend_option[@]}" "$@" \
    > "$out/node$i.log" 2>&1 &
  pids[$i]=$!
}

case "$mode" in
  collectives)
    for ((i = 0; i < nodes; i++)); do start_node "$i" "$program"; done
    failed=0
    for ((i = 0; i < nodes; i++)); do
      if ! wait "${pids[$i]}"; then
        echo "node $i failed:"
        cat "$out/node$i.log"
        failed=1
      fi
      # Hosts after the first find their address themselves and say so, once per host.
      lines=$(grep -c "weft: listening on" "$out/node$i.log")
      if [ "$i" != 0 ] && [ "$lines" != 1 ]; then
        echo "node $i logged its address $lines times, not once:"
        cat "$out/node$i.log"
        failed=1
      fi
    done
    [ "$failed" = 0 ] && echo "netns: every collective right on $nodes hosts x $per_node ranks"
    exit "$failed"
    ;;
  killed)
    for ((i = 0; i < nodes; i++)); do
      start_node "$i" "$program" all_reduce -b 4K -e 4K -n 1000000 -w 1
    done
    sleep 3  # the job is formed and streaming
    last=$((nodes - 1))
    dead_rank=$((last * per_node))
    victim=$(ip netns pids "${tag}n$last" | while read -r p; do
      if tr '\0' ' ' < "/proc/$p/cmdline" | grep -q "^$program"; then echo "$p"; fi
    done | head -1)
    [ -n "$victim" ] || { echo "no rank to kill on the last host"; cat "$out"/*.log; exit 1; }
    killed_at=$(date +%s)
    kill -9 "$victim"
    failed=0
    for ((i = 0; i < last; i++)); do
      wait "${pids[$i]}"
      took=$(($(date +%s) - killed_at))
      if ! grep -Eq "PeerError: .*rank $dead_rank([^0-9]|$)" "$out/node$i.log" ||
        [ "$took" -gt 30 ]; then
        echo "node $i: no PeerError naming rank $dead_rank within 30 s (took $took s):"
        cat "$out/node$i.log"
        failed=1
      fi
    done
    wait "${pids[$last]}"
    [ "$failed" = 0 ] && echo "netns: every survivor named rank $dead_rank"
    grep -h "rank $dead_rank" "$out"/node0.log | head -2
    exit "$failed"
    ;;
  bench)
    for ((i = 0; i < nodes; i++)); do
      # shellcheck disable=SC2086  # BENCH_ARGS: further weft-bench options, word-split
      start_node "$i" "$program" "${BENCH_OP:-all_reduce}" ${BENCH_SIZES:--b 4 -e 64M -f 4} \
        ${BENCH_ARGS:-}
    done
    failed=0
    for ((i = 0; i < nodes; i++)); do
      wait "${pids[$i]}" && continue
      failed=1
      [ "$i" != 0 ] && { echo "node $i failed:"; cat "$out/node$i.log"; }
    done
    cat "$out/node0.log"
    exit "$failed"
    ;;
  recover)
    data="$(cd "$(dirname "$0")/../../.." && pwd)/data/tinyshakespeare.txt"
    train=(--model.dim 64 --model.n_layers 2 --model.n_heads 2 --model.max_seq_len 64
      --training.seq_len 64 --training.batch_size 4 --training.steps 300
      --training.dataset_path "$data" --training.deterministic layout --metrics.log_freq 1
      --validation.enable false --comm.init_timeout_seconds 60)
    for ((i = 0; i < nodes; i++)); do
      start_node "$i" --recover "${RECOVER:-in-place}" --max-restarts 2 "$program" "${train[@]}"
    done
    for ((t = 0; t < 600; t++)); do  # until the job trains (at most 60 s)
      grep -q "\] step: " "$out/node0.log" && break
      sleep 0.1
    done
    last=$((nodes - 1))
    victim=$(ip netns pids "${tag}n$last" | while read -r p; do
      if tr '\0' ' ' < "/proc/$p/cmdline" | grep -q "^$program"; then echo "$p"; fi
    done | head -1)
    [ -n "$victim" ] || { echo "no rank to kill on the last host"; cat "$out"/*.log; exit 1; }
    kill -9 "$victim"
    failed=0
    for ((i = 0; i < nodes; i++)); do
      wait "${pids[$i]}" || { echo "node $i failed:"; failed=1; }
    done
    if ! grep -Eq "recovered (in place|elastically)" "$out/node0.log"; then
      echo "rank 0 did not say it recovered:"
      failed=1
    fi
    if grep -q "cannot record" "$out"/*.log; then
      echo "a weftrun could not record the death:"
      failed=1
    fi
    [ "$failed" = 0 ] || { cat "$out"/*.log; exit 1; }
    grep -Eh "starting it again in place|recovered (in place|elastically)|growing from" "$out"/*.log
    echo "netns: recovered ${RECOVER:-in-place} from a rank killed on host $last"
    exit 0
    ;;
  linkdown)
    for ((i = 0; i < nodes; i++)); do
      start_node "$i" "$program" all_reduce -b 4K -e 4K -n 1000000 -w 1 --timeout 4
    done
    sleep 3  # the job is formed and streaming
    last=$((nodes - 1))
    down_at=$(date +%s%3N)  # milliseconds
    ip -n "${tag}n$last" link set "${tag}a$last" down
    lost="rank ($((last * per_node))"
    for ((r = 1; r < per_node; r++)); do lost+="|$((last * per_node + r))"; done
    lost+=")[^0-9]"
    lost="PeerError: .*$lost"
    failed=0
    for ((i = 0; i < last; i++)); do
      wait "${pids[$i]}"
      took=$(($(date +%s%3N) - down_at))
      if ! grep -Eq "$lost" "$out/node$i.log" || [ "$took" -gt 7000 ]; then
        echo "node $i: no PeerError naming a rank of host $last within 4 + 2 + 1 s (took $took ms):"
        cat "$out/node$i.log"
        failed=1
      fi
    done
    kill "${pids[$last]}" 2>/dev/null
    wait "${pids[$last]}"
    [ "$failed" = 0 ] && echo "netns: every rank of the other hosts named the lost host's ranks"
    grep -Eh "$lost" "$out"/node0.log | head -2
    exit "$failed"
    ;;
esac
echo "unknown mode $mode"
exit 2
