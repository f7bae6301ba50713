#!/bin/bash
# weft-train's start-up memory estimate (weft-estimate's figures) against the peak resident
# memory rank 0 reaches, and weft-estimate's step time (from this machine's costs, measured
# first by weft-bench machine) against the median of the measured steps after the first,
# over layouts and configs: one line a run (36 runs, about 5 minutes on 2 cores), then how many
# are within 2 % (memory) and 10 and 20 % (step time), the median and the worst.
#
#   bench/estimate/accuracy.sh            # after make run or make test
#   STEPS=8 bench/estimate/accuracy.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
T=build/release/tools
steps=${STEPS:-6}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$T/weftrun" --nproc-per-node 2 "$T/weft-bench" machine --out "$work/machine.json" >/dev/null
error() { bc -l <<<"100 * ($1 - $2) / $2"; }
run() {  # ranks config overrides...
  local n=$1 config=$2
  shift 2
  local launch=("$T/weft-train")
  [ "$n" -gt 1 ] && launch=("$T/weftrun" --nproc-per-node "$n" "$T/weft-train")
  local line
  line=$("${launch[@]}" --config "configs/$config.toml" --training.steps "$steps" \
    --checkpoint.enable false --validation.enable false --metrics.log_freq 1 \
    --metrics.jsonl_path "$work/metrics.jsonl" "$@" 2>&1 |
    grep -o "estimated before the run: .*" | head -1)
  local estimated measured step_estimated step_measured
  estimated=$(sed -E 's/.*run: ([0-9.]+) MiB.*/\1/' <<<"$line")
  measured=$(sed -E 's/.*peak resident ([0-9.]+) MiB.*/\1/' <<<"$line")
  step_measured=$(python3 -c "import json, statistics, sys
print(statistics.median(r['time_s'] for r in map(json.loads, open(sys.argv[1])) if r.get('step', 0) > 1))" \
    "$work/metrics.jsonl")
  rm -f "$work/metrics.jsonl"
  step_estimated=$("$T/weft-estimate" --config "configs/$config.toml" --nproc "$n" \
    --machine "$work/machine.json" "$@" | sed -nE 's/^step ([0-9.]+) ms.*/\1/p')
  step_estimated=$(bc -l <<<"$step_estimated / 1000")
  printf '%-10s %2d  %-88s %8s %8s %+6.1f %%  %7.3f %7.3f %+6.1f %%\n' "$config" "$n" "$*" \
    "$estimated" "$measured" "$(error "$estimated" "$measured")" "$step_estimated" \
    "$step_measured" "$(error "$step_estimated" "$step_measured")"
  echo "$(error "$estimated" "$measured") $(error "$step_estimated" "$step_measured")" \
    >>"$work/errors"
}
# The errors against the targets: memory within 2 % a rank, step time within 10 % at the median
# and 20 % at worst.
summary() {
  python3 -c "import statistics, sys
rows = [tuple(map(float, line.split())) for line in open(sys.argv[1])]
memory, step = [r[0] for r in rows], [r[1] for r in rows]
print(f'memory: {sum(abs(e) <= 2 for e in memory)} of {len(rows)} within 2 %, worst {max(memory, key=abs):+.1f} %')
print(f'step time: median {statistics.median(step):+.1f} %, {sum(abs(e) <= 10 for e in step)} within 10 %, '
      f'{sum(abs(e) <= 20 for e in step)} within 20 %, worst {max(step, key=abs):+.1f} %')" "$work/errors"
}
printf '%-10s %2s  %-88s %8s %8s %8s  %7s %7s %8s\n' config n overrides 'MiB est' measured error \
  's est' measured error
bf16=(--training.mixed_precision_param bfloat16)
ckpt=(--training.activation_checkpointing true)
P=--parallelism
for config in debug llama_512; do
  run 1 $config
  run 1 $config "${bf16[@]}"
  run 1 $config "${ckpt[@]}"
  run 1 $config "${bf16[@]}" "${ckpt[@]}"
  run 2 $config
  run 2 $config "${bf16[@]}" $P.tensor_parallel_degree 2
  run 2 $config $P.tensor_parallel_degree 2
  run 2 $config $P.tensor_parallel_degree 2 $P.enable_sequence_parallel false
  run 2 $config $P.context_parallel_degree 2
  run 2 $config "${bf16[@]}" $P.context_parallel_degree 2 $P.context_parallel_rotate_method allgather
  run 2 $config $P.pipeline_parallel_degree 2 $P.pipeline_parallel_microbatch_size 2
  run 2 $config $P.pipeline_parallel_degree 2 $P.pipeline_parallel_microbatch_size 2 \
    $P.pipeline_parallel_schedule GPipe
  run 2 $config $P.pipeline_parallel_degree 2 $P.pipeline_parallel_microbatch_size 2 \
    $P.pipeline_parallel_schedule ZBVZeroBubble "${bf16[@]}"
  run 2 $config $P.data_parallel_shard_degree 2
  run 2 $config $P.data_parallel_shard_degree 2 $P.fsdp_mode zero1
  run 2 $config $P.data_parallel_shard_degree 2 "${bf16[@]}" "${ckpt[@]}"
  run 4 $config $P.pipeline_parallel_degree 2 $P.data_parallel_shard_degree 2 \
    $P.pipeline_parallel_microbatch_size 2
  run 2 $config $P.pipeline_parallel_degree 2 $P.pipeline_parallel_microbatch_size 2 \
    $P.pipeline_parallel_schedule InterleavedZeroBubble "${ckpt[@]}"
done
summary
