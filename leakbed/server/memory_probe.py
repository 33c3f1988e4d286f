"""Where the ServerApp's memory goes, step by step: an opt-in probe (off unless ``LEAKBED_MEMORY_PROBE`` names a file).

At each mark (a step of a round: the tap's shuffling, the evaluation...) it appends one JSON line to that file: the
process's resident size now (VmRSS), the most it reached since the previous mark (VmHWM, reset at each mark through
``/proc/self/clear_refs``, so a peak is charged to the step that made it), the wall and CPU seconds since the
previous mark, and with ``LEAKBED_TRACEMALLOC=1`` Python's traced memory (current and peak) with the top allocation
sites still held. Torch's CPU tensors are not traced by tracemalloc (numpy arrays are): the resident figures cover
both. The environment reaches the Simulation Runtime from ``leakbed run`` (``benchmarks.memory`` documents it).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

PROBE_ENV = "LEAKBED_MEMORY_PROBE"
TRACE_ENV = "LEAKBED_TRACEMALLOC"


def _status_kib() -> tuple[int, int]:
    rss = hwm = 0
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith(b"VmHWM:"):
                    hwm = int(line.split()[1])
    except OSError:
        pass
    return rss, hwm


def _reset_hwm() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets the peak resident size (VmHWM) to the current one
    except OSError:
        pass


class MemoryProbe:
    """``mark(step, round)`` appends a line; a probe without a file does nothing (the default)."""

    def __init__(self, path: str | None = None) -> None:
        path = os.environ.get(PROBE_ENV, "") if path is None else path
        self.path = Path(path) if path else None
        self.trace = bool(self.path) and os.environ.get(TRACE_ENV, "") not in ("", "0")
        self._lock = threading.Lock()
        self._t = time.perf_counter()
        self._cpu = time.process_time()
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.trace:
            import tracemalloc

            tracemalloc.start(8)
        _reset_hwm()

    @property
    def on(self) -> bool:
        return self.path is not None

    def mark(self, step: str, rnd: int | None = None, **extra: object) -> None:
        if self.path is None:
            return
        with self._lock:
            rss, hwm = _status_kib()
            now, cpu = time.perf_counter(), time.process_time()
            line: dict[str, object] = {
                "step": step,
                "round": rnd,
                "rss_mib": round(rss / 1024, 1),
                "peak_since_last_mib": round(hwm / 1024, 1),
                "wall_s": round(now - self._t, 4),
                "cpu_s": round(cpu - self._cpu, 4),
                **extra,
            }
            if self.trace:
                import tracemalloc

                current, peak = tracemalloc.get_traced_memory()
                top = tracemalloc.take_snapshot().statistics("lineno")[:8]
                line |= {
                    "traced_mib": round(current / 2**20, 1),
                    "traced_peak_mib": round(peak / 2**20, 1),
                    "top": [f"{s.traceback[0].filename.rsplit('/', 2)[-1]}:{s.traceback[0].lineno} {s.size / 2**20:.1f} MiB"
                            for s in top],
                }
                tracemalloc.reset_peak()
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
            _reset_hwm()
            self._t, self._cpu = time.perf_counter(), time.process_time()
