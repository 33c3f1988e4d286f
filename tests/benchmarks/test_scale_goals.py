"""The scale benchmark's verdict: memory flatness over the whole run and during the rounds alone."""

import subprocess
import sys

from benchmarks.measure import TreeMemory
from benchmarks.scale import goals


def _size(users: int, whole: float, rounds: float) -> dict:
    pool = {"dropped": 0, "failed": 0, "max_lag_rounds_from_files": 1}
    phases = {"federation": rounds, "after the last round": whole}
    return {"users": users, "ok": True, "peak_tree_pss_mib": whole, "peak_tree_pss_mib_by_phase": phases, "pool": pool}


def test_goals_tell_the_rounds_apart_from_the_attack_fit():
    verdict = goals([_size(100, 3000.0, 2000.0), _size(1000, 4500.0, 2300.0)])
    assert verdict["memory_ratio"] == 1.5 and not verdict["memory_flat"]
    assert verdict["federation_memory_ratio"] == 2300.0 / 2000.0
    assert verdict["lag_ok"] and verdict["nothing_dropped"]


# A process of its own holds the block, so the tree measured is only it: a pytest worker's tree also holds what
# earlier tests started, which can shrink while the block is held (seen: +88 MiB for 200 under load).
HOLDER = (
    "import sys, numpy as np; sys.stdin.readline(); block = np.ones(200 * 2**20, np.uint8); "
    "print('held', flush=True); sys.stdin.readline()"
)


def test_tree_memory_keeps_a_peak_per_phase():
    phase = ["before"]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        with TreeMemory(root=holder.pid, interval=0.05, pss_interval=0.0, phase=lambda: phase[0]) as mem:
            mem.sample()
            phase[0] = "holding 200 MiB"
            holder.stdin.write("allocate\n")
            holder.stdin.flush()
            assert holder.stdout.readline().strip() == "held"  # touched, so resident
            mem.sample()
            holder.stdin.write("release\n")
            holder.stdin.flush()
    finally:
        holder.wait(timeout=30)
    peaks = mem.report()["peak_tree_rss_mib_by_phase"]
    assert peaks["holding 200 MiB"] - peaks["before"] > 150, peaks
