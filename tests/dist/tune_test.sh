#!/bin/sh
# weft-bench --tune on 2 shm ranks (sizes up to 256 KiB, for time) writes a table for this
# machine; a job of the same backend and rank count reads it (no "using the defaults") and
# its results check out; one whose ranks share a CPU leaves the single copies it never takes
# at the defaults.
set -eu
weftrun=$1 bench=$2 table=$3
rm -f "$table"
out=$("$weftrun" --nproc-per-node 2 --backend shm "$bench" --tune -e 256K --out "$table" 2>&1)
echo "$out"
echo "$out" | grep -q "the table's effect"
grep -qx 'backend = shm' "$table"
grep -qx 'ranks = 2' "$table"
grep -q '^in_place_all_reduce_min = ' "$table"
out=$(WEFT_COLLECTIVE_TABLE="$table" "$weftrun" --nproc-per-node 2 --backend shm "$bench" \
  all_reduce -b 4 -e 1M -f 16 -n 2 -w 1 --check 2>&1)
echo "$out"
echo "$out" | grep -q 'Out of bounds values : 0 OK'
if echo "$out" | grep -q 'using the defaults'; then exit 1; fi
out=$(WEFT_COLLECTIVE_TABLE="$table" "$weftrun" --nproc-per-node 2 --backend shm "$bench" \
  all_reduce -b 4 -e 1M -f 16 -n 2 -w 1 --check --shared 2>&1)
echo "$out" | grep -q 'Out of bounds values : 0 OK'
# A table for other ranks is refused, with the reason.
out=$(WEFT_COLLECTIVE_TABLE="$table" "$weftrun" --nproc-per-node 3 --backend shm "$bench" \
  all_reduce -b 4 -e 4 -n 1 -w 0 2>&1)
echo "$out" | grep -q 'not this job'
# Ranks confined to one CPU: the engine never takes single copy for broadcasts and all-gathers
# there, so --tune leaves those thresholds at the defaults and says so.
cpu=$(taskset -pc $$ | sed 's/.*: *//; s/[-,].*//')
out=$(taskset -c "$cpu" "$weftrun" --nproc-per-node 2 --backend shm "$bench" --tune -e 64K \
  --out "$table" 2>&1)
echo "$out"
echo "$out" | grep -q 'broadcast single copy: not measured, the table keeps the defaults'
echo "$out" | grep -q 'all_gather single copy: not measured'
grep -qx 'single_copy_broadcast_min = 65536' "$table"
rm -f "$table"
