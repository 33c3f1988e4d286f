"""Peak memory of a process tree, sampled from /proc in a background thread (Linux, stdlib only).

The tree is a root process (by default this one) and all its descendants: Ray's GCS server,
raylet and worker/actor processes, the attack pool's worker processes. Every ``interval``
seconds the sampler sums VmRSS over the tree and keeps the maximum; every ``pss_interval``
seconds it also sums PSS from ``smaps_rollup``. RSS counts shared pages (the torch libraries
every worker maps, Ray's shared-memory object store) once per process, so the RSS sum
overstates the machine's real use; the PSS sum splits shared pages between their users and is
the closer figure, but reading it walks each process' page tables (tens of ms for a Ray worker
with CUDA torch loaded), hence its longer interval. A sample's own cost is reported.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field


def _children() -> dict[int, list[int]]:
    """ppid -> child pids, from /proc/<pid>/stat."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # exited meanwhile
            continue
        # the command name may hold spaces and parentheses: fields after the last ')' are "state ppid ..."
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def _task_children(pid: int) -> list[int]:
    """Children of ``pid`` from /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN); [] when it exited."""
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                kids.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return kids


_HAVE_TASK_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def tree_pids(root: int) -> list[int]:
    """``root`` and all its living descendants."""
    if _HAVE_TASK_CHILDREN:
        out, todo = [], [root]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(_task_children(pid))
        return out
    kids = _children()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def _fields_kib(path: str, keys: tuple[bytes, ...]) -> tuple[int | None, ...]:
    found: dict[bytes, int] = {}
    try:
        with open(path, "rb") as f:
            for line in f:
                key = line.split(b":", 1)[0] + b":"
                if key in keys:
                    found[key] = int(line.split()[1])
                    if len(found) == len(keys):
                        break
    except (OSError, ValueError):
        pass
    return tuple(found.get(k) for k in keys)


def rss_hwm_kib(pid: int) -> tuple[int | None, int | None]:
    """(VmRSS, VmHWM) in KiB; None for a process that exited (or a zombie)."""
    rss, hwm = _fields_kib(f"/proc/{pid}/status", (b"VmRSS:", b"VmHWM:"))
    return rss, hwm


def rss_kib(pid: int) -> int | None:
    return rss_hwm_kib(pid)[0]


def hwm_kib(pid: int) -> int | None:
    return rss_hwm_kib(pid)[1]


def pss_kib(pid: int) -> int | None:
    return _fields_kib(f"/proc/{pid}/smaps_rollup", (b"Pss:",))[0]


def label(pid: int) -> str:
    """A short name for a process: Ray's process title, 'attack-worker' for the pool's spawned workers, else comm."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        with open(f"/proc/{pid}/comm", "rb") as f:
            comm = f.read().strip().decode(errors="replace")
    except OSError:
        return "?"
    first = argv[0].decode(errors="replace") if argv else ""
    if first.startswith("ray::"):  # Ray's process title, e.g. ray::ClientAppActor.run while busy
        return first.split()[0].split(".")[0]
    if any(b"multiprocessing.spawn" in a for a in argv):
        return "mp-spawn child (attack worker)"
    if any(b"resource_tracker" in a for a in argv):
        return "mp resource tracker"
    if pid == os.getpid():
        return "driver (this process)"
    if comm.startswith("python") and len(argv) > 1 and argv[1]:
        arg = argv[2] if argv[1] in (b"-m", b"-u") and len(argv) > 2 else argv[1]
        return f"python {os.path.basename(arg.decode(errors='replace'))}"
    return comm


@dataclass
class TreeMemory:
    """Context manager sampling the tree's summed RSS (and PSS) every ``interval`` seconds."""

    root: int = field(default_factory=os.getpid)
    interval: float = 0.2
    pss_interval: float = 5.0  # 0 = never read PSS
    # names the phase a sample belongs to (e.g. the federation's rounds, then the attack fit after
    # them), so a peak can be told apart from what grows with known users rather than with clients
    phase: Callable[[], str] | None = None
    peak_pss_by_phase_kib: dict[str, int] = field(default_factory=dict)
    peak_rss_by_phase_kib: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    pss_samples: int = 0
    sample_seconds: float = 0.0  # time spent sampling, to show the sampler's own cost
    pss_seconds: float = 0.0
    _last_pss: float = field(default=-1e9, repr=False)
    peak_rss_kib: int = 0
    peak_pss_kib: int = 0
    peak_procs: int = 0
    peak_breakdown: dict[str, int] = field(default_factory=dict)  # label -> RSS KiB at the RSS peak
    hwm_kib: dict[int, int] = field(default_factory=dict)  # pid -> largest VmHWM seen
    start_rss_kib: int = 0
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def sample(self, pss: bool = False) -> None:
        t0 = time.perf_counter()
        now = self.phase() if self.phase is not None else None
        pids = tree_pids(self.root)
        total_rss = 0
        sizes: dict[int, int] = {}
        for pid in pids:
            rss, hwm = rss_hwm_kib(pid)
            if rss is None:
                continue
            sizes[pid] = rss
            total_rss += rss
            if hwm is not None:
                self.hwm_kib[pid] = max(self.hwm_kib.get(pid, 0), hwm)
        t1 = time.perf_counter()
        if self.pss_interval > 0 and (pss or t1 - self._last_pss >= self.pss_interval):
            self._last_pss = t1
            total_pss = sum(pss_kib(pid) or 0 for pid in sizes)
            self.peak_pss_kib = max(self.peak_pss_kib, total_pss)
            if now is not None:
                self.peak_pss_by_phase_kib[now] = max(self.peak_pss_by_phase_kib.get(now, 0), total_pss)
            self.pss_samples += 1
            self.pss_seconds += time.perf_counter() - t1
        if now is not None:
            self.peak_rss_by_phase_kib[now] = max(self.peak_rss_by_phase_kib.get(now, 0), total_rss)
        if total_rss > self.peak_rss_kib:
            self.peak_rss_kib = total_rss
            breakdown: Counter[str] = Counter()
            for pid, rss in sizes.items():
                breakdown[label(pid)] += rss
            self.peak_breakdown = dict(breakdown.most_common())
        self.peak_procs = max(self.peak_procs, len(sizes))
        self.samples += 1
        self.sample_seconds += t1 - t0

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> TreeMemory:
        self.start_rss_kib = rss_kib(self.root) or 0
        self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tree-memory")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def report(self) -> dict:
        mib = 1024.0
        return {
            "peak_tree_rss_mib": round(self.peak_rss_kib / mib, 1),
            "peak_tree_pss_mib": round(self.peak_pss_kib / mib, 1) if self.pss_samples else None,
            "peak_processes": self.peak_procs,
            "driver_start_rss_mib": round(self.start_rss_kib / mib, 1),
            "driver_hwm_mib": round((hwm_kib(self.root) or 0) / mib, 1),
            "max_single_process_hwm_mib": round(max(self.hwm_kib.values(), default=0) / mib, 1),
            # largest maxrss of any reaped descendant (getrusage), a cross-check for the sampler
            "max_reaped_child_maxrss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / mib, 1),
            "rss_mib_at_peak_by_process": {k: round(v / mib, 1) for k, v in self.peak_breakdown.items()},
            "peak_tree_pss_mib_by_phase": {k: round(v / mib, 1) for k, v in self.peak_pss_by_phase_kib.items()},
            "peak_tree_rss_mib_by_phase": {k: round(v / mib, 1) for k, v in self.peak_rss_by_phase_kib.items()},
            "samples": self.samples,
            "interval_s": self.interval,
            "mean_rss_sample_ms": round(1000 * self.sample_seconds / max(self.samples, 1), 2),
            "pss_samples": self.pss_samples,
            "pss_interval_s": self.pss_interval,
            "mean_pss_sample_ms": round(1000 * self.pss_seconds / max(self.pss_samples, 1), 2),
        }


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` in seconds (its own threads; reaped children not included)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


def tree_cpu_by_label(root: int | None = None) -> dict[int, tuple[str, float]]:
    """pid -> (label, CPU seconds so far) for ``root`` (default this process) and its descendants."""
    out = {}
    for pid in tree_pids(os.getpid() if root is None else root):
        cpu = cpu_seconds(pid)
        if cpu is not None:
            out[pid] = (label(pid), cpu)
    return out


def cpu_between(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds each kind of process (label) used between two ``tree_cpu_by_label`` snapshots
    (a process born in between counts from 0; one that exited in between is lost)."""
    used: Counter[str] = Counter()
    for pid, (name, cpu) in after.items():
        used[name] += cpu - before.get(pid, (name, 0.0))[1]
    return {k: round(v, 2) for k, v in used.most_common()}


def thread_cpu_by_name() -> dict[str, float]:
    """CPU seconds so far of this process' threads, by Python thread name (threads Python did not
    start, e.g. gRPC's and Ray's, are summed as "native"), to tell the driver's workers apart."""
    import threading

    def kind(name: str) -> str:  # "Thread-7 (_dispatch)" -> "_dispatch": the target says what it does
        return name[name.index("(") + 1 : -1] if name.startswith("Thread-") and "(" in name else name

    names = {t.native_id: kind(t.name) for t in threading.enumerate()}
    used: Counter[str] = Counter()
    me = os.getpid()
    for tid in os.listdir(f"/proc/{me}/task"):
        try:
            with open(f"/proc/{me}/task/{tid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        used[names.get(int(tid), "native")] += (int(fields[11]) + int(fields[12])) / _TICK
    return dict(used)
