#!/bin/sh
# check_format.sh SOURCE_DIR CLANG_FORMAT: fails when a C++ file of the tree differs from .clang-format (clang-format --dry-run -Werror
# prints each difference); `make format` rewrites them. The files are git's when the tree is a
# checkout, else every .h and .cc under the source folders.
set -eu
cd "$1"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$(git ls-files '*.h' '*.cc')
else
  files=$(find weft tools tests bench examples python -name '*.h' -o -name '*.cc')
fi
# shellcheck disable=SC2086  # one argument per file
"$2" --dry-run -Werror $files
