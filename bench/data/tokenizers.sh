#!/usr/bin/env bash
# Tokenizers' encoding throughput: weft's (bench_tokenizer, 1 and 2 threads) beside the
# references the tests compare with (npm's js-tiktoken and llama3-tokenizer-js under Node,
# SentencePiece's Python module), on the same 2 MB corpus, same machine, same run.
#   bench/data/tokenizers.sh            (after make test, or any build of build/release)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
out=$build/tests/data/tokenizer_references
cmake --build $build --target bench_tokenizer tokenizer_reference_test -- --quiet
ctest --test-dir $build -R data.tokenizer_references_setup --output-on-failure >/dev/null
rm -f "$out/done"  # run the references again, now, for their timings
tests/data/reference/setup.sh "$PWD" "$out"
bytes=$(stat -c %s "$out/corpus.txt")
echo "references (1 thread), MB/s on $bytes bytes:"
/usr/bin/python3 - "$out" "$bytes" <<'PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
for f in ("timing.json", "timing_spm.json"):
    for name, s in json.load(open(f"{out}/{f}")).items():
        print(f"  {name:24s} {n / 1e6 / s:8.2f}")
PY
echo "weft, MB/s (medians of 3; Google Benchmark's M is 2^20 bytes):"
$build/bench/bench_tokenizer --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  2>/dev/null | grep -E "median" | sed -E 's/bytes_per_second=([0-9.]+)M\/s/\1/' |
  awk '{printf "  %-52s %8.2f\n", $1, $NF * 1.048576}'
