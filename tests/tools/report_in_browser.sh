#!/usr/bin/env bash
# weft-report as a user opens it: two short weft-train runs (float32 and bfloat16) written
# with metrics.jsonl_path, their report, and the page rendered by headless Chromium (Debian's
# chromium): a screenshot is taken, and the rendered page has both runs' curves with every
# point each run logged.
#
#   report_in_browser.sh WEFT_TRAIN WEFT_REPORT SOURCE WORK
set -euo pipefail
train=$1 report=$2 src=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
for dtype in float32 bfloat16; do
  "$train" --config "$src/configs/debug.toml" --training.steps 8 --training.batch_size 2 \
    --training.dataset_path "$src/data/tinyshakespeare.txt" --checkpoint.enable false \
    --metrics.log_freq 1 --validation.freq 4 --training.mixed_precision_param $dtype \
    --metrics.jsonl_path "$work/$dtype.jsonl" > "$work/$dtype.log"
done
"$report" -o "$work/report" "$work/float32.jsonl" "$work/bfloat16.jsonl"
browser=$(command -v chromium || command -v chromium-browser)
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$work/profile")
timeout 120 "$browser" "${flags[@]}" --window-size=900,2200 --screenshot="$work/report.png" \
  "file://$work/report/index.html" 2> "$work/chromium.log"
timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$work/report/index.html" \
  > "$work/dom.html" 2>> "$work/chromium.log"
python3 - "$work" <<'PY'
import json, pathlib, re, sys
work = pathlib.Path(sys.argv[1])
png = (work / "report.png").read_bytes()
assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000, f"screenshot: {len(png)} bytes"
dom = (work / "dom.html").read_text()
for run in ("float32", "bfloat16"):
    records = [json.loads(l) for l in (work / f"{run}.jsonl").read_text().splitlines()]
    steps = {r["step"] for r in records if "loss" in r}
    vals = {r["step"] for r in records if "val_loss" in r}
    for chart, want in (("loss", len(steps)), ("validation", len(vals))):
        figure = re.search(rf'<figure id="{chart}">(.*?)</figure>', dom, re.S).group(1)
        line = re.search(rf'data-run="{run}" data-points="(\d+)"[^>]* points="([^"]*)"', figure)
        got = (int(line.group(1)), len(line.group(2).split()))
        assert got == (want, want), f"{chart} of {run}: {got} points, logged {want}"
        print(f"{chart} of {run}: {want} points rendered")
PY
