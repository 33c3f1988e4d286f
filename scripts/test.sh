#!/usr/bin/env bash
# The test suite: install, lint, then every test (unit, simulation and real-process integration).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_LOG_LEVEL=WARNING GRPC_ENABLE_FORK_SUPPORT=false
# Byte code is cached (__pycache__, ignored by git) even where the environment says not to: with
# PYTHONDONTWRITEBYTECODE=1 on a fresh clone every process of the suite compiled leakbed's sources again (about
# 1 CPU-second each process that loads the ServerApp or a ClientApp) and every worker rewrote every test module's
# asserts again (each worker's collection: 13 s here instead of 5 s).
unset PYTHONDONTWRITEBYTECODE
.venv/bin/ruff check --no-cache .  # as on a fresh clone: a stale cache here once hid an import-order error
# Spread over xdist workers, one module (or test class) per unit, longest first (tests/schedule.py);
# LEAKBED_TEST_WORKERS=0 runs in one process.
workers=${LEAKBED_TEST_WORKERS:-2}
dist=()
[ "$workers" = 0 ] || dist=(-n "$workers" --dist loadscope --no-loadscope-reorder)
exec .venv/bin/python -m pytest "${dist[@]}" "$@"
