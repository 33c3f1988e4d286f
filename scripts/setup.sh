#!/usr/bin/env bash
# Create .venv and install leakbed with its pinned dependencies (once; again when pyproject.toml changes).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.leakbed-installed
want=$(cat pyproject.toml plugins/*/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[test,build]"
  # The attack plugins shipped beside leakbed (plugins/: each its own package, found by its entry points like any
  # researcher's): installed the way a researcher installs theirs.
  for plugin in plugins/*/; do
    .venv/bin/python -m pip install --quiet --no-deps --no-build-isolation -e "$plugin"
  done
  echo "$want" > "$stamp"
fi
# pip install -e leaves setuptools' leakbed.egg-info in the checkout (no METADATA, no RECORD): wherever the checkout is
# on sys.path (pytest's PYTHONPATH, python -m), importlib.metadata finds it before the install's .dist-info and every
# built-in attack declared itself without a distribution. The install's metadata is in .venv; the leftover goes.
rm -rf leakbed.egg-info
