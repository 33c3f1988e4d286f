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
# uv installs the same pins as pip, downloading, unpacking and compiling byte code in parallel: a fresh install
# took 29 s here where pip took about 100 s on one core. pip (with its own configuration) is the fallback
# wherever uv cannot be had or fails; uv reads the system's CA store (--native-tls), as pip here does. uv is a
# dependency of Flower's (uv>=0.13.5,<0.14), so the pin is the version the environment holds anyway.
UV_PIN="uv==0.13.9"
uv=no
install() {  # install ARGS... with uv, or with pip
  if [ "$uv" = yes ]; then
    .venv/bin/uv pip install --python .venv/bin/python --native-tls --quiet --compile-bytecode "$@"
  else
    .venv/bin/python -m pip install --quiet "$@"
  fi
}
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet "$UV_PIN" && uv=yes || echo "setup: no $UV_PIN; installing with pip" >&2
  install -e ".[test,build]" || { echo "setup: uv failed; installing with pip" >&2; uv=no; install -e ".[test,build]"; }
  # The attack plugins shipped beside leakbed (plugins/: each its own package, found by its entry points like any
  # researcher's): installed the way a researcher installs theirs.
  for plugin in plugins/*/; do
    install --no-deps --no-build-isolation -e "$plugin"
  done
  echo "$want" > "$stamp"
fi
# pip install -e leaves setuptools' leakbed.egg-info in the checkout (no METADATA, no RECORD): wherever the checkout is
# on sys.path (pytest's PYTHONPATH, python -m), importlib.metadata finds it before the install's .dist-info and every
# built-in attack declared itself without a distribution. The install's metadata is in .venv; the leftover goes.
rm -rf leakbed.egg-info
