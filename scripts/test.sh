#!/usr/bin/env bash
# The test suite: install, lint, then every test (unit, simulation and real-process integration).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_LOG_LEVEL=WARNING GRPC_ENABLE_FORK_SUPPORT=false
.venv/bin/ruff check --no-cache .  # as on a fresh clone: a stale cache here once hid an import-order error
# Spread over xdist workers, one module (or test class) per unit, longest first (tests/schedule.py);
# LEAKBED_TEST_WORKERS=0 runs in one process.
workers=${LEAKBED_TEST_WORKERS:-2}
dist=()
[ "$workers" = 0 ] || dist=(-n "$workers" --dist loadscope --no-loadscope-reorder)
exec .venv/bin/python -m pytest "${dist[@]}" "$@"
