#!/usr/bin/env bash
# The virtual environment the Python tests run from: Debian's python3 with its site packages
# (numpy, torch), and weft installed into it by pip from this build (WEFT_BUILD_DIR), again on
# every run so that it holds the tree's current modules. Offline: --no-build-isolation and
# --no-index, with Debian's setuptools and wheel.
#
#   pip_env.sh SOURCE BUILD        (the environment: BUILD/pip-env)
set -euo pipefail
src=$1 build=$(realpath "$2")
unset PYTHONPATH
env="$build/pip-env"
[ -x "$env/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$env"
cd "$src"
WEFT_BUILD_DIR="$build" "$env/bin/python" -m pip install --quiet --no-build-isolation \
  --no-index --no-deps --force-reinstall .
"$env/bin/python" -c 'import weft.dist; print("weft", weft.dist.__file__)'
