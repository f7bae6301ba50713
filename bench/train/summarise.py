#!/usr/bin/env python3
"""A weft-train metrics file (JSON lines) -> "tokens/s mfu% memory_mib" over the logged steps
after the first two (warm-up), tokens/s weighted by step time. Used by compare.sh and
scaling.sh."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if '"loss"' in line][2:]
seconds = sum(r["time_s"] for r in rows)
tokens = sum(r["tps"] * r["time_s"] for r in rows)
mfu = 100 * sum(r["mfu"] for r in rows) / len(rows)
print(f'{tokens / seconds:.0f} {mfu:.1f}% {rows[-1]["memory_bytes"] / 2**20:.0f}')
