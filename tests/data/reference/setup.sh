#!/usr/bin/env bash
# The tokenizer tests' references, made once per build tree (the tests' set-up, never at run
# time): npm's js-tiktoken and llama3-tokenizer-js at the versions package-lock.json pins, and
# SentencePiece's Python module, each run on the test corpus.
#   setup.sh <source dir> <out dir>
set -euo pipefail
src=$1
out=$2
here="$src/tests/data/reference"
mkdir -p "$out"
stamp=$(cat "$here"/package.json "$here"/package-lock.json "$here"/*.cjs "$here"/*.py "$0" \
        "$src/data/tinyshakespeare.txt" | sha256sum | cut -d' ' -f1)
if [ -f "$out/done" ] && [ "$(cat "$out/done")" = "$stamp" ]; then exit 0; fi
rm -f "$out/done"
for tool in node npm; do
  command -v $tool >/dev/null || {
    echo "setup.sh: $tool is missing: scripts/install-deps installs it (nodejs, npm)" >&2; exit 1; }
done
cp "$here/package.json" "$here/package-lock.json" "$out/"
(cd "$out" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || {
  echo "setup.sh: npm could not install the reference tokenizers (is the npm registry" \
       "reachable?)" >&2; exit 1; }
python3 "$here/make_corpus.py" "$src/data/tinyshakespeare.txt" "$out/corpus.txt"
NODE_PATH="$out/node_modules" node "$here/export.cjs" "$out/corpus.txt" "$out"
/usr/bin/python3 "$here/spm_reference.py" "$out/corpus.txt" "$out" 2>/dev/null
echo "$stamp" > "$out/done"
