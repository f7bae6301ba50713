#!/usr/bin/env bash
# Distributed checkpoints on llama_512 (configs/llama_512.toml: 25M parameters; with AdamW's
# two moments 302 MB of state): for one rank, DDP 2, FSDP 2 and TP 2,
#   - save: the seconds a synchronous save adds to a run (wall time of 2 steps and a save, less
#     2 steps without one; the median of REPEAT pairs), and the bytes each rank writes;
#   - load: the seconds a resume adds (wall time of a run that resumes and has nothing left to
#     train, less the start-up of a run without a checkpoint), the same layout and resharded
#     (FSDP 2 -> 1 rank, 1 rank -> FSDP 2);
#   - the stall of an asynchronous save: the saving step's copy into the staging buffer, and
#     the steps while the background write runs, against the steps without a save.
# OLD_TRAIN=<weft-train of an earlier commit> measures save and load the same way for it (the
# gathered single file of weft before distributed checkpoints): build it from a worktree of
# 5c993f4 with cmake --preset release && cmake --build build/release --target weft-train.
#
#   bench/train/checkpoint.sh                 (REPEAT=2 by default)
#   CONFIG=configs/llama_1024.toml bench/train/checkpoint.sh   (the wider model)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
cmake --build "$build" --target weft-train weftrun -- --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "cpu: $model, $(nproc) cores; disk: $(df -h "$out" | awk 'NR == 2 {print $1}')"
repeat=${REPEAT:-2}
config=${CONFIG:-configs/llama_512.toml}
echo "model: $config"

# seconds TRAIN LAYOUT ARGS...: the wall seconds of one run (its log in $out/log).
seconds() {
  local train=$1 layout=$2 launch=()
  shift 2
  case $layout in
    1x1) ;;
    ddp) launch=("$build/tools/weftrun" --nproc-per-node 2) ;;
    fsdp) launch=("$build/tools/weftrun" --nproc-per-node 2)
          set -- --parallelism.data_parallel_shard_degree 2 "$@" ;;
    tp) launch=("$build/tools/weftrun" --nproc-per-node 2)
        set -- --parallelism.tensor_parallel_degree 2 "$@" ;;
  esac
  # A global batch of 2 sequences (the state's size does not depend on it; short steps do).
  case $layout in
    ddp | fsdp) set -- --training.batch_size 1 "$@" ;;
    *) set -- --training.batch_size 2 "$@" ;;
  esac
  local start end
  start=$(date +%s.%N)
  "${launch[@]}" "$train" --config "$config" --validation.enable false \
    --metrics.peak_gflops 100 --metrics.log_freq 1 --training.threads 1 "$@" > "$out/log" 2>&1
  end=$(date +%s.%N)
  python3 -c "print(f'{$end - $start:.3f}')"
}

median() { python3 -c "import statistics, sys; print(f'{statistics.median(map(float, sys.argv[1:])):.2f}')" "$@"; }

# save TRAIN LAYOUT: "seconds bytes-per-rank-max bytes-total" of a save after 2 steps.
save() {
  local train=$1 layout=$2 diffs=()
  for _ in $(seq "$repeat"); do
    rm -rf "$out/ck"
    local with without
    with=$(seconds "$train" "$layout" --training.steps 2 --checkpoint.enable true \
      --checkpoint.folder "$out/ck")
    without=$(seconds "$train" "$layout" --training.steps 2 --checkpoint.enable false)
    diffs+=("$(python3 -c "print($with - $without)")")
  done
  local sizes
  sizes=$(find "$out/ck/step-00000002" -name '*.safetensors' -printf '%s\n')
  echo "$(median "${diffs[@]}") $(echo "$sizes" | sort -n | tail -1) $(echo "$sizes" | awk '{s += $1} END {print s}')"
}

# load TRAIN FROM TO: seconds a resume adds, layout TO reading a checkpoint of layout FROM.
load() {
  local train=$1 from=$2 to=$3 diffs=()
  rm -rf "$out/ck"
  seconds "$train" "$from" --training.steps 2 --checkpoint.enable true \
    --checkpoint.folder "$out/ck" > /dev/null
  for _ in $(seq "$repeat"); do
    local resumed base step
    resumed=$(seconds "$train" "$to" --training.steps 2 --checkpoint.resume true \
      --checkpoint.enable false --checkpoint.folder "$out/ck")
    base=$(seconds "$train" "$to" --training.steps 1 --checkpoint.enable false \
      --metrics.jsonl_path "$out/base.jsonl")
    step=$(python3 -c "import json; print(json.loads(open('$out/base.jsonl').readlines()[-1])['time_s'])")
    diffs+=("$(python3 -c "print($resumed - ($base - $step))")")
  done
  median "${diffs[@]}"
}

mib() { python3 -c "print(f'{$1 / 2**20:.1f}')"; }

for train in "$build/tools/weft-train" ${OLD_TRAIN:-}; do
  echo "== $train"
  printf "%-6s %8s %16s %14s %8s\n" layout "save s" "MiB/rank (max)" "MiB (total)" "load s"
  for layout in 1x1 ddp fsdp tp; do
    read -r s max total < <(save "$train" "$layout")
    printf "%-6s %8s %16s %14s %8s\n" "$layout" "$s" "$(mib "$max")" "$(mib "$total")" \
      "$(load "$train" "$layout" "$layout")"
  done
  echo "resharded load: fsdp -> 1x1 $(load "$train" fsdp 1x1) s, 1x1 -> fsdp $(load "$train" 1x1 fsdp) s"
done

echo "== asynchronous save (FSDP 2, a save every 4 steps of 12)"
for mode in disabled async; do
  rm -rf "$out/ck" "$out/async.jsonl"
  seconds "$build/tools/weft-train" fsdp --training.steps 12 --checkpoint.enable true \
    --checkpoint.interval 4 --checkpoint.async_mode "$mode" --checkpoint.folder "$out/ck" \
    --metrics.jsonl_path "$out/async.jsonl" > /dev/null
  staged=$({ grep -o 'staged in [0-9.]*' "$out/log" || true; } |
    awk '{s += $3} END {if (NR) printf "%.3f", s / NR; else print "-"}')
  saved=$({ grep -o 'saved checkpoint [^ ]* ([0-9.]*' "$out/log" || true; } | sed 's/.*(//' |
    paste -sd' ')
  # Step times: the steps after a save (5, 9) while its write runs, against the others.
  python3 - "$out/async.jsonl" "$mode" "$staged" "$saved" <<'PY'
import json, statistics, sys
steps = {j["step"]: j["time_s"] for j in map(json.loads, open(sys.argv[1])) if "time_s" in j}
after = [steps[s] for s in (5, 9) if s in steps]
others = [t for s, t in steps.items() if s not in (1, 4, 5, 8, 9, 12)]
print(f"{sys.argv[2]:8s} staging {sys.argv[3]} s per save; save to durable {sys.argv[4]} s; "
      f"step {statistics.median(others):.3f} s, the step after a save {statistics.median(after):.3f} s")
PY
done
