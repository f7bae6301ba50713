#!/usr/bin/env bash
# weft-report as a user opens it: three short weft-train runs (float32, bfloat16, and DDP on
# 2 ranks) written with metrics.jsonl_path, their report, and the page rendered by headless
# Chromium (Debian's chromium): a screenshot is taken, and the rendered page has every run's
# curves with every point each run logged, and the DDP run's memory per rank; --png's figures
# are PNGs of their SVGs' sizes.
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
"$(dirname "$train")/weftrun" --nproc-per-node 2 "$train" --config "$src/configs/debug.toml" \
  --training.steps 8 --training.batch_size 2 --training.dataset_path "$src/data/tinyshakespeare.txt" \
  --checkpoint.enable false --metrics.log_freq 1 --validation.freq 4 \
  --metrics.jsonl_path "$work/ddp.jsonl" > "$work/ddp.log"
"$report" --png -o "$work/report" "$work/float32.jsonl" "$work/bfloat16.jsonl" "$work/ddp.jsonl"
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
for run in ("float32", "bfloat16", "ddp"):
    records = [json.loads(l) for l in (work / f"{run}.jsonl").read_text().splitlines()]
    steps = {r["step"] for r in records if "loss" in r}
    vals = {r["step"] for r in records if "val_loss" in r}
    for chart, want in (("loss", len(steps)), ("validation", len(vals))):
        figure = re.search(rf'<figure id="{chart}">(.*?)</figure>', dom, re.S).group(1)
        line = re.search(rf'data-run="{run}" data-points="(\d+)"[^>]* points="([^"]*)"', figure)
        got = (int(line.group(1)), len(line.group(2).split()))
        assert got == (want, want), f"{chart} of {run}: {got} points, logged {want}"
        print(f"{chart} of {run}: {want} points rendered")
ranks = re.search(r'<figure id="memory_ranks">(.*?)</figure>', dom, re.S).group(1)
assert re.findall(r'data-run="(ddp rank \d)"', ranks) == ["ddp rank 0", "ddp rank 1"], ranks[:300]
assert re.search(r'<figure id="communication">.*data-run="ddp"', dom, re.S), "no communication"
print("memory per rank and communication of ddp rendered")
for svg in sorted((work / "report").glob("*.svg")):
    png = svg.with_suffix(".png").read_bytes()
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    want = re.search(r'<svg[^>]* width="(\d+)" height="(\d+)"', svg.read_text()).groups()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and (width, height) == tuple(map(int, want)), svg
    print(f"{svg.with_suffix('.png').name}: {width} x {height}")
PY
