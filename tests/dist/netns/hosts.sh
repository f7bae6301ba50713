# Sourced by the netns tests: make_hosts N makes N network namespaces, each a "host" with
# its own addresses, 10.77.0.<i+1> and fd77::<i+1> on interface ${tag}a<i>, joined by a
# bridge in a switch namespace of its own, so no traffic leaves them; remove_hosts removes
# them (call it from an EXIT trap). With $NETNS_LINK_RATE set (a tc rate: 1gbit, 10gbit),
# each host's link runs at that rate each way (a token bucket on both ends of its veth), so
# that the link rather than memory bounds what crosses hosts, as a real network does
# (bench/collectives/netns_compare.sh). Names carry $tag (unique to this run: tests may run
# concurrently): host i is namespace ${tag}n<i>. Exits 77, which ctest counts as skipped,
# without root or iproute2.
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "netns test: needs root and iproute2 (ip netns); skipped"
  exit 77
fi
tag="w$$"

# A token bucket: bursts of at most 256 KiB (more than the 64 KiB segments the kernel passes
# whole), the rest queued, up to 100 ms of it, and sent at the rate.
shape() {  # namespace device
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$NETNS_LINK_RATE" burst 256kb \
    latency 100ms || { echo "netns: cannot shape $2 to $NETNS_LINK_RATE (tc tbf)" >&2; exit 1; }
}

make_hosts() {  # N
  hosts=$1
  ip netns add "${tag}sw"
  ip -n "${tag}sw" link add br0 type bridge
  ip -n "${tag}sw" link set br0 up
  local i
  for ((i = 0; i < hosts; i++)); do
    local ns="${tag}n$i"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "${tag}a$i" netns "$ns" type veth peer name "${tag}b$i" netns "${tag}sw"
    ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev "${tag}a$i"
    ip -n "$ns" addr add "fd77::$((i + 1))/64" dev "${tag}a$i" nodad
    ip -n "$ns" link set "${tag}a$i" up
    ip -n "${tag}sw" link set "${tag}b$i" master br0
    ip -n "${tag}sw" link set "${tag}b$i" up
    if [ -n "${NETNS_LINK_RATE:-}" ]; then
      shape "$ns" "${tag}a$i"
      shape "${tag}sw" "${tag}b$i"
    fi
  done
}

# Kills what still runs in them first: deleting a namespace does not stop its processes.
remove_hosts() {
  local i
  for ((i = 0; i < ${hosts:-0}; i++)); do
    ip netns pids "${tag}n$i" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "${tag}n$i" 2>/dev/null
  done
  ip netns del "${tag}sw" 2>/dev/null
}
