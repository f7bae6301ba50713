#!/usr/bin/env bash
# Several hosts under Open MPI's mpirun: NODES network namespaces (hosts.sh), each with a
# hostname of its own (a UTS namespace: Open MPI tells hosts apart by name), and one mpirun
# in the first that starts PER_NODE ranks of PROGRAM on each, reaching the other hosts
# through a launch agent that enters their namespace where a cluster's would ssh. The ranks
# join with MASTER_ADDR (the first host) and the job token, as a user's mpirun line passes
# them. Prints mpirun's output; fails as mpirun does.
#
#   mpirun.sh MPIRUN NODES PER_NODE [MPIRUN_OPTION...] -- PROGRAM [ARG...]
set -uo pipefail
mpirun=$1 nodes=$2 per_node=$3
shift 3
options=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  options+=("$1")
  shift
done
[ $# -ge 2 ] || { echo "usage: mpirun.sh MPIRUN NODES PER_NODE [OPTION...] -- PROGRAM [ARG...]"; exit 2; }
shift  # --
source "$(dirname "$0")/hosts.sh"
out=$(mktemp -d)
trap 'remove_hosts; rm -rf "$out"' EXIT
make_hosts "$nodes"

# mpirun calls the agent as ssh: `agent HOST COMMAND...`, the command one shell line.
cat > "$out/agent" <<AGENT
#!/bin/sh
host=\$1
shift
i=\$((\${host##*.} - 1))
exec ip netns exec "${tag}n\$i" unshare --uts /bin/sh -c "hostname ${tag}h\$i && \$*"
AGENT
chmod +x "$out/agent"
hostlist=""
for ((i = 0; i < nodes; i++)); do hostlist+="${hostlist:+,}10.77.0.$((i + 1)):$per_node"; done

ip netns exec "${tag}n0" unshare --uts /bin/sh -c "hostname ${tag}h0 && exec \"\$0\" \"\$@\"" \
  timeout 150 "$mpirun" --allow-run-as-root --oversubscribe --mca plm_rsh_agent "$out/agent" \
  --host "$hostlist" -np $((nodes * per_node)) -x MASTER_ADDR=10.77.0.1 -x MASTER_PORT=29518 \
  -x WEFT_JOB_TOKEN=netns-mpirun-token "${options[@]}" "$@"
