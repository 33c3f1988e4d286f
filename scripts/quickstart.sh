#!/usr/bin/env bash
# The main job: install, run the quickstart experiment on the embedded synthetic users, print the report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/leakbed run quickstart "$@"
