#!/usr/bin/env bash
# The GPU paths on a machine with one CUDA card (issue 33.6): the quickstart with CUDA ClientApps and a quarter of the
# GPU per Ray actor, one round of shadow updates on CUDA (loop against batched, benchmarks.shadow), and a 1,000-client
# cohort with a tenth of the GPU per actor (benchmarks.cohort). Run from the repository root:
#   bash benchmarks/gpu_check.sh [WHEELS_DIR]
# WHEELS_DIR: wheels of what the machine's Python lacks (installed with pip --target under $T, nothing else touched;
# on a machine with leakbed installed, leave it out). Logs and the quickstart's report land in $OUT (default /tmp/lb-out).
# Environment: PY (python3), T (/tmp/lb), SANDBOX (workers.sandbox: off where bubblewrap is not installed),
# COHORT_ROUNDS (5), and the time limits QS_S, SH_S, CO_S [s].
set -u
PY=${PY:-python3}; T=${T:-/tmp/lb}; OUT=${OUT:-/tmp/lb-out}; SB=${SANDBOX:-off}; mkdir -p "$T" "$OUT"
step() { echo "=== $(date +%T) $*"; }
if [ -n "${1:-}" ]; then
  step install from "$1"
  "$PY" -m pip install -q --no-index --no-deps --target "$T/site" "$1"/*.whl 2>&1 | tail -2
  "$PY" -m pip install -q --no-deps --no-build-isolation --ignore-requires-python --target "$T/lb" . 2>&1 | tail -2
  export PYTHONPATH="$T/lb:$T/site" PATH="$T/lb/bin:$T/site/bin:$(dirname "$(command -v "$PY")"):$PATH"
fi
export FLWR_TELEMETRY_ENABLED=0 FLWR_LOG_LEVEL=WARNING LEAKBED_CACHE="$T/cache"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tail -2
"$PY" -c "import os, torch, flwr, ray; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'flwr', flwr.__version__, 'ray', ray.__version__, 'cpus', os.cpu_count())"

step quickstart on CUDA, 0.25 GPU per ClientApp actor, sandbox "$SB"
timeout "${QS_S:-300}" "$PY" -m leakbed.cli run quickstart --out "$T/qs" --set device=cuda \
  --set simulation.client_gpus=0.25 --set simulation.client_cpus=2 --set workers.sandbox="$SB" > "$OUT/quickstart.log" 2>&1
echo "quickstart exit $?"; tail -25 "$OUT/quickstart.log"
cp "$T/qs/report.md" "$OUT/quickstart-report.md" 2>/dev/null

step shadow updates on CUDA
timeout "${SH_S:-120}" "$PY" -m benchmarks.shadow --device cuda --threads 1 --repeats 2 > "$OUT/shadow.log" 2>&1
echo "shadow exit $?"; grep -v '^{' "$OUT/shadow.log" | tail -22 | cut -c1-300

step 1,000-client cohort on CUDA, 0.1 GPU per actor
timeout "${CO_S:-600}" "$PY" -m benchmarks.cohort --users 1000 --rounds "${COHORT_ROUNDS:-5}" --out "$T/co" --set device=cuda \
  --set simulation.client_gpus=0.1 --set simulation.client_cpus=1 --set workers.sandbox="$SB" > "$OUT/cohort.log" 2>&1
echo "cohort exit $?"; grep -v '^[a-z_]* = \|^\[\|^ \|^$\|^]' "$OUT/cohort.log" | tail -30 | cut -c1-300
cat "$T"/co/run/*/progress.json 2>/dev/null
step done
