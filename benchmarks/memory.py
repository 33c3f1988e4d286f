"""Peak memory (PSS) of a whole ``leakbed run``, by kind of process: where a run's gigabytes are.

``python -m benchmarks.memory [--config quickstart --config text-50] [--set KEY=VALUE ...]
                              [--interval 2] [--out DIR]``

Each config runs as ``leakbed run CONFIG --set ... --out DIR`` in a process of its own (the product's path: the CLI,
its simulation SuperLink, the SuperExec, the Simulation Runtime running leakbed's ServerApp, the private Ray head and
the ClientApp actors, the attack lanes in their sandboxes). Every ``--interval`` seconds the sampler reads the PSS
(``/proc/<pid>/smaps_rollup``, ``benchmarks.measure.pss_kib``) of every process of the run: the CLI's tree, and the
processes that detached from it (Ray's daemons), found by a mark in their environment that every child inherits. PSS
splits shared pages (the torch libraries every Python maps, Ray's object store) between the processes that map them,
so the sums add up to what the machine holds. Per kind it reports the peak of the kind's summed PSS, the largest
single process and how many processes of that kind were seen; the ServerApp's peak is reported with the round it
happened in (from the progress file the ServerApp writes). The table for ``leakbed/configs/text-50.toml`` is written first if
missing (``benchmarks.text_workload``). Set ``LEAKBED_MEMORY_PROBE=FILE`` to have the ServerApp write its own
resident size at each step of each round (``server.memory_probe``; ``LEAKBED_TRACEMALLOC=1`` adds tracemalloc's top
allocation sites). Nothing asserts on the numbers; the last line of stdout is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import psutil

from benchmarks.common import QUIET_ENV, table
from benchmarks.measure import pss_kib, tree_pids

ROOT = Path(__file__).resolve().parents[1]
MARK = "LEAKBED_MEMORY_BENCH"  # in the environment of the run's CLI, inherited by every process it starts
DEFAULT_CONFIGS = ["quickstart", "text-50"]  # built-in configs, by name
KINDS = (
    "leakbed CLI (launcher)",
    "flwr run (submitter)",
    "SuperLink",
    "SuperExec",
    "ServerApp (Simulation Runtime)",
    "Ray GCS",
    "Ray raylet",
    "Ray other daemons",
    "ClientApp actors",
    "Ray idle workers",
    "attack lanes",
    "other",
)


def kind_of(pid: int, root: int) -> str:
    """Which part of a run the process is, from its command line."""
    if pid == root:
        return "leakbed CLI (launcher)"
    try:
        argv = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "other"
    line = " ".join(argv)
    first = argv[0] if argv else ""
    program = os.path.basename(first)
    if first.startswith("ray::"):  # a Ray worker's title: ray::ClientAppActor[.run], ray::IDLE
        return "ClientApp actors" if "ClientAppActor" in first else "Ray idle workers"
    if program == "gcs_server":
        return "Ray GCS"
    if program == "raylet":
        return "Ray raylet"
    if program in ("bwrap", "setpriv", "prlimit") or any(a.startswith("leakbed.workers.inside") for a in argv[:4]):
        return "attack lanes"
    script = os.path.basename(argv[1]) if len(argv) > 1 else ""
    if any(os.path.basename(a) == "default_worker.py" for a in argv[:4]):  # a Ray worker before it took its title
        return "Ray idle workers"
    if script == "flwr-simulation":
        return "ServerApp (Simulation Runtime)"
    if script == "flower-superexec":
        return "SuperExec"
    if script == "flower-superlink":
        return "SuperLink"
    if script == "flwr" and "run" in argv:
        return "flwr run (submitter)"
    if "/ray/" in line or script == "ray" or "setup_worker.py" in line:
        return "Ray other daemons"
    return "other"


def name_of(pid: int) -> str:
    """A short name: the program and its first arguments."""
    try:
        argv = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "?"
    return " ".join(os.path.basename(a) if i < 2 else a for i, a in enumerate(argv[:3]))[:80]


def marked_pids(value: str) -> list[int]:
    """Processes whose environment carries this run's mark (Ray's daemons detach from the CLI's tree)."""
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARK) == value:
                out.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return out


class RunMemory:
    """Samples a run's processes every ``interval`` seconds in a thread: PSS per process, summed per kind."""

    def __init__(self, root: int, mark: str, interval: float, progress: Path | None) -> None:
        self.root, self.mark, self.interval, self.progress = root, mark, interval, progress
        self.kinds: dict[int, str] = {}
        self.names: dict[int, str] = {}
        self.peak_kind_kib: Counter[str] = Counter()
        self.peak_proc_kib: Counter[str] = Counter()  # the largest single process of each kind
        self.seen: dict[str, set[int]] = {}
        self.peak_total_kib = 0
        self.peak_total_breakdown: dict[str, int] = {}
        self.server_peak_round: int | None = None
        self.server_by_round: dict[int, int] = {}  # round being run -> the ServerApp's peak PSS in it
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="run-memory")
        self._marked: list[int] = []
        self._marked_at = 0.0

    def _round(self) -> int | None:
        """The round the ServerApp is in: one after the last it reported."""
        if self.progress is None:
            return None
        try:
            files = list(self.progress.glob("*/progress.json"))
            newest = max(files, key=lambda f: f.stat().st_mtime) if files else None
            return int(json.loads(newest.read_text())["round"]) + 1 if newest else 0
        except (OSError, ValueError, KeyError):
            return None

    def sample(self) -> None:
        now = time.monotonic()
        if now - self._marked_at > 10 or not self._marked:  # scanning every environment is the costly part
            self._marked, self._marked_at = marked_pids(self.mark), now
        pids = dict.fromkeys([*tree_pids(self.root), *self._marked])
        by_kind: Counter[str] = Counter()
        for pid in pids:
            pss = pss_kib(pid)
            if pss is None:
                continue
            if pid not in self.kinds or self.kinds[pid] in ("other", "Ray idle workers"):  # a worker becomes an actor
                self.kinds[pid] = kind_of(pid, self.root)
                self.names[pid] = name_of(pid)
            kind = self.kinds[pid]
            by_kind[kind] += pss
            self.seen.setdefault(kind, set()).add(pid)
            self.peak_proc_kib[kind] = max(self.peak_proc_kib[kind], pss)
            if kind == "ServerApp (Simulation Runtime)":
                rnd = self._round()
                if rnd is not None:
                    self.server_by_round[rnd] = max(self.server_by_round.get(rnd, 0), pss)
                if pss >= self.peak_proc_kib[kind]:
                    self.server_peak_round = rnd
        for kind, kib in by_kind.items():
            self.peak_kind_kib[kind] = max(self.peak_kind_kib[kind], kib)
        total = sum(by_kind.values())
        if total > self.peak_total_kib:
            self.peak_total_kib, self.peak_total_breakdown = total, dict(by_kind)
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> RunMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def report(self) -> dict:
        mib = 1024.0
        kinds = [k for k in KINDS if k in self.seen]
        return {
            "peak_pss_mib_by_kind": {k: round(self.peak_kind_kib[k] / mib, 1) for k in kinds},
            "largest_process_pss_mib_by_kind": {k: round(self.peak_proc_kib[k] / mib, 1) for k in kinds},
            "processes_by_kind": {k: len(self.seen[k]) for k in kinds},
            "process_names_by_kind": {k: sorted({self.names.get(p, "?") for p in self.seen[k]})[:12] for k in kinds},
            "peak_total_pss_mib": round(self.peak_total_kib / mib, 1),
            "at_total_peak_mib": {k: round(v / mib, 1) for k, v in self.peak_total_breakdown.items()},
            "peak_total_pss_without_ray_actors_mib": round(
                max(0, self.peak_total_kib - self.peak_total_breakdown.get("ClientApp actors", 0)
                    - self.peak_total_breakdown.get("Ray idle workers", 0)) / mib, 1),
            "server_app_peak_round": self.server_peak_round,
            "server_app_peak_pss_mib_by_round": {str(r): round(v / mib, 1) for r, v in sorted(self.server_by_round.items())},
            "samples": self.samples,
            "interval_s": self.interval,
        }


def numbers(run_dir: Path) -> dict:
    """What a run computed, to compare before/after a change: each prior's utility per round and attack scores."""
    out: dict = {}
    for metrics in sorted(run_dir.glob("*/metrics.json")):
        m = json.loads(metrics.read_text())
        out[metrics.parent.name] = {
            "utility": m.get("utility"),
            "attackers": {n: {k: s.get(k) for k in ("ap", "chance_ap", "top1")} for n, s in m.get("attackers", {}).items()},
            "pool": {k: m.get("pool", {}).get(k) for k in ("tapped", "analysed", "dropped", "failed")},
        }
    return out


def run_one(config: str, sets: list[str], out: Path, interval: float) -> dict:
    """``leakbed run`` of ``config`` into ``out``, sampled; its memory report, wall time and numbers."""
    if Path(config).stem == "text-50":
        from benchmarks.text_workload import DEFAULT_OUT, write

        if not (ROOT / DEFAULT_OUT).exists():
            print(f"writing the text workload's table {DEFAULT_OUT} ...", flush=True)
            write(ROOT / DEFAULT_OUT)
    mark = uuid.uuid4().hex
    env = {**os.environ, **{k: v for k, v in QUIET_ENV.items() if k not in os.environ}, MARK: mark}
    cmd = [sys.executable, "-m", "leakbed.cli", "run", config, *(a for s in sets for a in ("--set", s)), "--out", str(out)]
    log = out.parent / f"{out.name}.log"
    t0 = time.perf_counter()
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            with RunMemory(proc.pid, mark, interval, out) as mem:
                code = proc.wait()
        finally:  # an interrupted run: end what it left (its processes carry the mark), by pid
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
            left = marked_pids(mark)
            if left:
                from leakbed.core.processes import terminate

                terminate(left, grace=5)
    wall = time.perf_counter() - t0
    if code:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"leakbed run {config} exited {code}: {' | '.join(tail)} (log: {log})")
    return {"config": config, "set": sets, "wall_s": round(wall, 1), "memory": mem.report(), "numbers": numbers(out)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", action="append", help=f"a run's config (repeatable; default {' and '.join(DEFAULT_CONFIGS)})")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run (repeatable)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between samples (default 2)")
    p.add_argument("--out", help="keep the run folders and summary.json here (default: a temp dir, removed)")
    args = p.parse_args(argv)
    configs = args.config or DEFAULT_CONFIGS
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="leakbed-memory-"))
    base.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for config in configs:
            name = Path(config).stem
            print(f"-- {config} {' '.join(args.set)} ...", flush=True)
            res = run_one(config, args.set, base / name, args.interval)
            results.append(res)
            m = res["memory"]
            print(f"   {res['wall_s']} s, peak total PSS {m['peak_total_pss_mib']} MiB "
                  f"({m['peak_total_pss_without_ray_actors_mib']} MiB without the Ray actors), {m['samples']} samples",
                  flush=True)
    finally:
        if not args.out:
            import shutil

            shutil.rmtree(base, ignore_errors=True)
    names = [Path(r["config"]).stem for r in results]
    kinds = [k for k in KINDS if any(k in r["memory"]["peak_pss_mib_by_kind"] for r in results)]
    rows: list[list[object]] = []
    for k in kinds:
        row: list[object] = [k]
        for r in results:
            m = r["memory"]
            peak = m["peak_pss_mib_by_kind"].get(k)
            n = m["processes_by_kind"].get(k, 0)
            row += [peak, f"{m['largest_process_pss_mib_by_kind'].get(k, '-')} ({n})" if n else "-"]
        rows.append(row)
    rows.append(["whole run (sum at its peak)", *[x for r in results for x in (r["memory"]["peak_total_pss_mib"], "")]])
    rows.append(["  without the Ray actors", *[x for r in results
                                                for x in (r["memory"]["peak_total_pss_without_ray_actors_mib"], "")]])
    header = ["peak PSS [MiB]", *[x for n in names for x in (f"{n}: kind", f"{n}: largest one (count)")]]
    print("\n== peak PSS by kind of process (sum of the kind's processes at one sample; its largest single process)")
    print(table(header, rows))
    for r in results:
        m = r["memory"]
        print(f"{Path(r['config']).stem}: ServerApp peak in round {m['server_app_peak_round']} (0 = before round 1); "
              f"by round [MiB]: {m['server_app_peak_pss_mib_by_round']}")
    summary = {"benchmark": "memory", "interval_s": args.interval, "cpus": os.cpu_count(),
               "memory_total_mib": round(psutil.virtual_memory().total / 2**20), "runs": results}
    if args.out:
        (base / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
