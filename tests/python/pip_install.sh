#!/usr/bin/env bash
# weft's Python package as pip users get it (docs/PYTHON.md): `pip install .` into a fresh
# virtual environment of Debian's python3 (--system-site-packages, for torch and numpy), then
# the chapter's listing 16.6 through `import weft.torch` from that environment, with nothing
# on PYTHONPATH, under weftrun, mpirun and srun's variables; and the wheel `make wheel`
# builds, installed into a second environment.
#
#   pip_install.sh SOURCE BUILD WEFTRUN MPIEXEC
# The extensions come from the configured build BUILD (WEFT_BUILD_DIR); offline, as CI is:
# --no-build-isolation and --no-index, with Debian's setuptools and wheel.
set -euo pipefail
src=$1 build=$(realpath "$2") weftrun=$3 mpiexec=$4
unset PYTHONPATH
work="$build/pip-test"
rm -rf "$work" && mkdir -p "$work"
listing="$src/examples/python/listing_16_6.py"
check="$src/tests/python/check_listing.py"

want=$(sed -n 's/^project(weft VERSION \([0-9.]*\) .*/\1/p' "$src/CMakeLists.txt")
got=$(sed -n 's/^version = "\([0-9.]*\)".*/\1/p' "$src/pyproject.toml")
[ "$want" = "$got" ] || { echo "pyproject.toml's version $got is not CMake's $want"; exit 1; }

/usr/bin/python3 -m venv --system-site-packages "$work/venv"
py="$work/venv/bin/python"
(cd "$src" && WEFT_BUILD_DIR="$build" "$py" -m pip install --quiet --no-build-isolation \
  --no-index .)
cd "$work"  # not the source tree, whose python/ must not be what is imported
"$py" -c 'import weft, weft.dist, weft.torch, sys
assert weft.__file__.startswith(sys.prefix), weft.__file__
print("imported from", weft.__file__)'
echo "== weftrun"
"$py" "$check" "$listing" "$weftrun" --nproc-per-node 3 "$py"
echo "== mpirun"
"$py" "$check" "$listing" "$mpiexec" --oversubscribe --allow-run-as-root -np 3 "$py"
echo "== srun's variables"
"$py" "$check" "$listing" "$py" "$src/tests/python/fake_srun.py" 3 "$py"

echo "== the wheel"
(cd "$src" && WEFT_BUILD_DIR="$build" /usr/bin/python3 -m pip wheel --quiet \
  --no-build-isolation --no-index --no-deps -w "$work/dist" .)
wheel=$(ls "$work"/dist/weft-"$want"-*.whl)
/usr/bin/python3 -m zipfile -l "$wheel" | grep -E 'weft/(_weft|_torch)\.cpython|weft/dist\.py'
/usr/bin/python3 -m venv --system-site-packages "$work/venv2"
"$work/venv2/bin/python" -m pip install --quiet --no-index "$wheel"
"$work/venv2/bin/python" -c 'import weft.dist, weft.torch; print("the wheel imports")'
