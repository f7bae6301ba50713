#!/bin/bash
# weft-plan's choice against measurement: for debug and llama_512 on 2 ranks, weft-plan's five
# fastest layouts and five common ones (FSDP, DDP, TP, CP, 1F1B) each train STEPS steps at
# the same global batch, in ROUNDS rounds (each round runs every layout once, so that a slow
# spell of the host falls on one run of each layout, not on all runs of one); one line a layout
# (estimated step, and the median over the rounds of each run's median step), then how far the
# plan's first choice is from the fastest measured; where that is another layout, RECHECK fresh
# rounds of the two compare them again. About 6 minutes a round on 2 cores.
#
#   bench/estimate/plan.sh            # after make run or make test
#   ROUNDS=1 STEPS=8 RECHECK=0 bench/estimate/plan.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
T=build/release/tools
steps=${STEPS:-6}
rounds=${ROUNDS:-3}
recheck=${RECHECK:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The median step (after the first) of one STEPS-step run of config $1 with flags $2.
measure() {
  rm -f "$work/metrics.jsonl"
  # shellcheck disable=SC2086
  "$T/weftrun" --nproc-per-node 2 "$T/weft-train" --config "configs/$1.toml" \
    --training.steps "$steps" --checkpoint.enable false --validation.enable false \
    --metrics.log_freq 1 --metrics.jsonl_path "$work/metrics.jsonl" $2 </dev/null >/dev/null 2>&1
  python3 -c "import json, statistics, sys
print('%.3f' % statistics.median(r['time_s'] for r in map(json.loads, open(sys.argv[1])) if r.get('step', 0) > 1))" \
    "$work/metrics.jsonl"
}
"$T/weftrun" --nproc-per-node 2 "$T/weft-bench" machine --out "$work/machine.json" >/dev/null
for config in debug llama_512; do
  "$T/weft-plan" --config "configs/$config.toml" --nproc 2 --machine "$work/machine.json" \
    --json "$work/plan.json" >/dev/null
  python3 - "$work/plan.json" "$config" >"$work/layouts" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
def flags(keys): return " ".join(f"--{k} {v}" for k, v in keys.items())
for i, c in enumerate(plan["best"]):
    print(f"plan{i + 1}\t{c['layout']}\t{flags(c['keys'])}")
P = "--parallelism."
common = {
    "FSDP 2": "data_parallel_shard_degree 2 --training.batch_size 8",
    "DDP 2": "data_parallel_replicate_degree 2 --training.batch_size 8",
    "TP 2": "tensor_parallel_degree 2 --parallelism.data_parallel_replicate_degree 1 --training.batch_size 16",
    "CP 2": "context_parallel_degree 2 --parallelism.data_parallel_replicate_degree 1 --training.batch_size 16",
    "PP 2, 1F1B x 8": "pipeline_parallel_degree 2 --parallelism.data_parallel_replicate_degree 1 "
                      "--parallelism.pipeline_parallel_microbatch_size 2 --training.batch_size 16",
}
for name, rest in common.items():
    print(f"common\t{name}\t{P}{rest}")
PY
  printf '%-10s %-7s %-70s %8s %8s  %s\n' "$config" which layout 'est s' 'meas s' 'each round'
  for _ in $(seq "$rounds"); do
    n=0
    while IFS=$'\t' read -r which name flags; do
      n=$((n + 1))
      measure "$config" "$flags" >>"$work/$config.$n.measured"
    done <"$work/layouts"
  done
  n=0
  while IFS=$'\t' read -r which name flags; do
    n=$((n + 1))
    measured=$(python3 -c "import statistics, sys
print('%.3f' % statistics.median(float(l) for l in open(sys.argv[1])))" "$work/$config.$n.measured")
    # shellcheck disable=SC2086
    estimated=$("$T/weft-estimate" --config "configs/$config.toml" --nproc 2 \
      --machine "$work/machine.json" $flags | sed -nE 's/^step ([0-9.]+) ms.*/\1/p')
    printf '%-10s %-7s %-70s %8.3f %8s  %s\n' "" "$which" "$name" "$(bc -l <<<"$estimated / 1000")" \
      "$measured" "$(paste -sd' ' "$work/$config.$n.measured")"
    printf '%s\t%s\t%s\n' "$which" "$name" "$measured" >>"$work/$config.results"
  done <"$work/layouts"
  python3 - "$work/$config.results" >"$work/verdict" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
first = next(float(r[2]) for r in rows if r[0] == "plan1")
at = min(range(len(rows)), key=lambda i: float(rows[i][2]))
fastest = float(rows[at][2])
print(f"  the plan's first choice: {first:.3f} s, the fastest measured {fastest:.3f} s "
      f"({rows[at][1]}): {100 * (first - fastest) / fastest:+.1f} %\t{at + 1}")
PY
  cut -f1 "$work/verdict"
  fastest_line=$(cut -f2 "$work/verdict")
  # The fastest of ten layouts measured within a few per cent of each other is partly the one
  # whose runs were luckiest: its time, chosen by the same runs, is biased low. Fresh runs of
  # the two, alternating, compare them without that bias.
  if [ "$fastest_line" != 1 ] && [ "$recheck" -gt 0 ]; then
    first_flags=$(sed -n 1p "$work/layouts" | cut -f3)
    fastest_flags=$(sed -n "${fastest_line}p" "$work/layouts" | cut -f3)
    : >"$work/first" && : >"$work/fastest"
    for _ in $(seq "$recheck"); do
      measure "$config" "$first_flags" >>"$work/first"
      measure "$config" "$fastest_flags" >>"$work/fastest"
    done
    python3 - "$work/first" "$work/fastest" "$recheck" <<'PY'
import statistics, sys
first, fastest = ([float(l) for l in open(p)] for p in sys.argv[1:3])
a, b = statistics.median(first), statistics.median(fastest)
print(f"  {sys.argv[3]} fresh rounds of the two: first choice {a:.3f} s "
      f"({' '.join(f'{x:.3f}' for x in first)}), that layout {b:.3f} s "
      f"({' '.join(f'{x:.3f}' for x in fastest)}): {100 * (a - b) / b:+.1f} %")
PY
  fi
done
