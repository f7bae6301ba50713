#!/bin/bash
# The Llama 3 configurations at 64, 256 and 1,024 ranks on a cluster of hosts like this one:
# weft-plan's fastest layout for each, from this machine's measured costs, with 8 ranks a host,
# a network of 25 GB/s a rank and 5 us between hosts, 64 GiB a rank and half a sequence of
# 8,192 positions a rank (the global batch). One line a job; about a minute and a half.
#
#   bench/estimate/at_scale.sh            # after make run or make test
#   MACHINE=machine.json bench/estimate/at_scale.sh   # costs measured before
set -euo pipefail
cd "$(dirname "$0")/../.."
T=build/release/tools
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
machine=${MACHINE:-$work/machine.json}
[ -f "$machine" ] || "$T/weftrun" --nproc-per-node 2 "$T/weft-bench" machine --out "$machine" >/dev/null
printf '| model | ranks | layout | peak GiB a rank | step (s) | tokens/s | layouts (fit) | plan (s) |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for model in 8b 70b 405b; do
  for n in 64 256 1024; do
    start=$(date +%s.%N)
    "$T/weft-plan" --config "configs/llama3_$model.toml" --nproc "$n" --machine "$machine" \
      --ranks-per-host 8 --link-latency-us 5 --link-gbs 25 --memory-per-rank 64 \
      --global-batch $((n / 2)) --keep 1 --json "$work/plan.json" >/dev/null 2>"$work/err" ||
      grep -q "no layout fits" "$work/err" || { cat "$work/err" >&2; exit 1; }
    seconds=$(bc -l <<<"$(date +%s.%N) - $start")
    python3 - "$work/plan.json" "$model" "$n" "$seconds" <<'PY'
import json, os, sys
path, model, n, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
plan = json.load(open(path)) if os.path.exists(path) else {"best": [], "weighed": 0, "fitting": 0}
if plan["best"]:
    b = plan["best"][0]
    print(f"| Llama 3 {model.upper()} | {n} | {b['layout']} | {b['peak_bytes'] / 2**30:.1f} | "
          f"{b['step_seconds']:,.0f} | {b['tokens_per_second']:,.0f} | "
          f"{plan['weighed']:,} ({plan['fitting']:,}) | {seconds:.1f} |")
else:
    print(f"| Llama 3 {model.upper()} | {n} | none fits | | | | | {seconds:.1f} |")
PY
    rm -f "$work/plan.json"
  done
done
