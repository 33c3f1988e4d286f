"""What one sandbox per attack costs: a whole run's wall time and peak memory, a lane's start, the introspection.

``python -m benchmarks.lanes [--config quickstart] [--set KEY=VALUE ...] [--tree DIR] [--skip-run]``
``python -m benchmarks.lanes --config text-50 --set 'split.priors=["random"]' --against DIR [--against-config FILE]
[--against-set KEY=VALUE ...]``

* the run: ``leakbed run`` of the config in a process of its own, its whole process tree sampled
  (``benchmarks.measure.TreeMemory``: summed RSS every 0.2 s, summed PSS every 2 s) and timed; with ``--tree DIR``
  the leakbed of another checkout runs instead (``PYTHONPATH=DIR``, the same virtual environment), e.g. the
  commit before lanes, whose attack pool shared two worker processes between every attack (``git worktree add
  /tmp/old 1c75358``; compile its service once: ``python -m grpc_tools.protoc -I proto --python_out=.
  --grpc_python_out=. proto/attacks/service.proto`` in it);
* this checkout only: the start of a lane (sandboxed and plain; an attack's lane and the shadow lane, which loads
  torch's lazy parts), and the introspection of leakbed's built-in attacks with an empty cache, then cached;
* ``--against DIR``: the same run from the checkout at ``DIR`` first (its config ``--against-config``, default
  ``--config``; the same ``--set``, then ``--against-set``), then from ``--tree``, one after the other on this machine
  (``--against`` may be ``--tree`` itself with other settings, e.g. ``--against-set workers.shadow_lanes=1``); printed: each wall
  time and their ratio, each prior's attack lag (``max_lag_rounds``: how many rounds after its own the attack side
  finished a round at worst), the attack side's time after the last round (drain and fit), the machine's load
  before and after each, and whether every attacker's AP, chance AP, top-1 and top-5 and the final utility are the
  same (the first differences named). The lane starts are not measured then.

Prints a table and, last, one JSON line. Nothing asserts on the times; the exit status is 1 when ``--against``'s
numbers differ.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.measure import TreeMemory

ROOT = Path(__file__).resolve().parents[1]


POOL = ("lanes_started", "lane_start_seconds", "shadow_lanes", "shadow_seconds", "fit_seconds", "max_lag_rounds")
SCORES = ("ap", "chance_ap", "top1", "top5")  # of each attacker: what "the same numbers" compares


def run_once(config: str, sets: list[str], tree: Path) -> dict:
    """One ``leakbed run`` from ``tree``: wall seconds, peak summed RSS and PSS of its process tree, its pool stats, the
    load average before and after, and per prior every attacker's scores, the final utility and the phases' times."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="leakbed-lanes-") as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "leakbed.cli", "run", config, *(a for s in sets for a in ("--set", s)), "--out", str(out)]
        env = {**os.environ, "PYTHONPATH": str(tree), "FLWR_TELEMETRY_ENABLED": "0"}
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        with TreeMemory(root=proc.pid, interval=0.2, pss_interval=2.0) as mem:
            _, err = proc.communicate()
        wall = time.perf_counter() - t0
        if proc.returncode:
            raise RuntimeError(f"leakbed run failed ({proc.returncode}): {err.decode(errors='replace')[-2000:]}")
        priors, numbers = {}, {}
        for prior in sorted(p.name for p in out.iterdir() if (p / "metrics.json").exists()):
            metrics = json.loads((out / prior / "metrics.json").read_text())
            priors[prior] = {k: metrics["pool"].get(k) for k in POOL}
            priors[prior].update(fl_s=metrics.get("fl_seconds"), after_last_round_s=metrics.get("attack_fit_seconds"))
            utility = metrics.get("utility", {})
            numbers[prior] = {"utility": utility[max(utility, key=int)] if utility else None,
                              **{a: {k: m.get(k) for k in SCORES} for a, m in metrics.get("attackers", {}).items()}}
        top = json.loads((out / "metrics.json").read_text())
    scores = {p: {a: round(m["ap"], 6) for a, m in v.items()}
              for p, v in top.items() if isinstance(v, dict) and p != "attack_sandbox"}
    return {"wall_s": wall, "peak_rss_mib": mem.peak_rss_kib / 1024, "peak_pss_mib": mem.peak_pss_kib / 1024,
            "peak_procs": mem.peak_procs, "pool": priors, "ap": scores, "numbers": numbers,
            "load_before": load, "load_after": os.getloadavg()[0]}


def differences(a: object, b: object, where: str = "") -> list[str]:
    """Where two runs' numbers differ (exactly: the same seed must give the same floats), as ``path: a != b``."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{where}/{k}")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def compare(config: str, against_config: str, sets: list[str], tree: Path, against: Path, against_sets: list[str]) -> dict:
    """The run from ``against`` first, then from ``tree``; their wall times, lags and numbers side by side."""
    old = run_once(against_config, [*sets, *against_sets], against)
    new = run_once(config, sets, tree)
    diff = differences(old["numbers"], new["numbers"])
    rows = [("", str(against), str(tree))]
    rows.append(("wall [s]", f"{old['wall_s']:.1f}", f"{new['wall_s']:.1f}"))
    rows.append(("load average before -> after", *(f"{r['load_before']:.1f} -> {r['load_after']:.1f}" for r in (old, new))))
    for prior in sorted(set(old["pool"]) | set(new["pool"])):
        o, n = old["pool"].get(prior, {}), new["pool"].get(prior, {})
        for key in ("max_lag_rounds", "shadow_lanes", "fl_s", "after_last_round_s", "shadow_seconds", "lane_start_seconds"):
            rows.append((f"{prior}: {key}", *(str(round(v, 1)) if isinstance(v, float) else str(v)
                                               for v in (o.get(key), n.get(key)))))
    rows.append(("peak PSS [MiB]", f"{old['peak_pss_mib']:.0f}", f"{new['peak_pss_mib']:.0f}"))
    width = max(len(r[0]) for r in rows)
    for r in rows:
        print(f"{r[0]:<{width}}  {r[1]:>24}  {r[2]:>24}")
    ratio = new["wall_s"] / old["wall_s"]
    lag = max((p.get("max_lag_rounds") or 0) for p in new["pool"].values()) if new["pool"] else None
    print(f"wall time ratio (this / against): {ratio:.3f}; attack lag here: {lag} round(s) at most; numbers "
          + ("the same" if not diff else f"DIFFER in {len(diff)} places: {'; '.join(diff[:5])}"))
    return {"against": old, "this": new, "wall_ratio": ratio, "max_lag_rounds": lag, "same_numbers": not diff,
            "differences": diff}


def lane_starts(repeats: int) -> dict[str, list[float]]:
    """Seconds from spawning a lane to its open reply: an attack's (mlp) and the shadow lane, sandboxed and plain."""
    from leakbed.core.data import federation
    from leakbed.core.knowledge import AttackerKnowledge
    from leakbed.core.models import attack_keys, build_model
    from leakbed.workers.lane import LaneProcess, LaneSpec
    from leakbed.workers.sandbox import Limits
    from tests.conftest import tiny_config

    cfg = tiny_config()
    fed = federation(cfg, "random")
    keys = attack_keys(build_model(cfg.model, fed.corpus), ["final"])
    from dataclasses import replace

    knowledge = AttackerKnowledge(fed.prior(), replace(fed.corpus, users={}), cfg.model, keys, 0, "cpu")
    out: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="leakbed-lane-start-") as tmp:
        inputs = Path(tmp) / "inputs"
        knowledge.save(inputs)
        for _ in range(repeats):
            for kind, spec in (("attack", LaneSpec("s/mlp", "attack", "mlp", "mlp", {"epochs": 5})),
                               ("shadow", LaneSpec("s/shadow", "shadow", output="shadow.training"))):
                for how, limits in (("sandboxed", Limits()), ("plain", None)):
                    lane = LaneProcess(spec, inputs, log_path=Path(tmp) / f"{kind}-{how}.log", limits=limits)
                    try:
                        lane.start()
                        out.setdefault(f"{kind} lane, {how}", []).append(lane.start_seconds)
                    finally:
                        lane.stop()
    return out


def introspection() -> dict[str, float]:
    """Seconds to learn leakbed's built-in attacks' declarations: an empty cache, then the cache."""
    from leakbed.workers.introspect import Introspector, published
    from leakbed.workers.sandbox import Limits

    names = sorted(n for n, ep in published().items() if ep.dist is not None and ep.dist.name == "leakbed")
    with tempfile.TemporaryDirectory(prefix="leakbed-decl-cache-") as tmp:
        box = Introspector(Limits(), cache=Path(tmp))
        t0 = time.perf_counter()
        box.declarations(names)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        box.declarations(names)
        cached = time.perf_counter() - t0
    return {"cold_s": cold, "cached_s": cached, "attacks": len(names)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks.lanes", description=__doc__.splitlines()[0])
    p.add_argument("--config", default="quickstart", help="the run's config (default: the quickstart)")
    p.add_argument("--set", action="append", default=[], help="an override for the run (repeatable)")
    p.add_argument("--tree", default=str(ROOT), help="the checkout whose leakbed runs (default: this one)")
    p.add_argument("--repeats", type=int, default=3, help="lane starts of each kind (default 3)")
    p.add_argument("--skip-run", action="store_true", help="only the lane starts and the introspection")
    p.add_argument("--against", help="another checkout whose run goes first, compared with this one (no lane starts)")
    p.add_argument("--against-config", help="the config --against runs (default: --config)")
    p.add_argument("--against-set", action="append", default=[], help="an override for --against's run only (repeatable)")
    args = p.parse_args(argv)
    tree = Path(args.tree).resolve()
    summary: dict = {"tree": str(tree), "config": args.config, "set": args.set}
    if args.against:
        against = Path(args.against).resolve()
        summary.update(against=str(against), against_config=args.against_config or args.config, against_set=args.against_set)
        summary["compare"] = compare(args.config, args.against_config or args.config, args.set, tree, against, args.against_set)
        print(json.dumps(summary))
        return 0 if summary["compare"]["same_numbers"] else 1
    if not args.skip_run:
        summary["run"] = run_once(args.config, args.set, tree)
        r = summary["run"]
        print(f"run: {r['wall_s']:.1f} s wall, peak RSS {r['peak_rss_mib']:.0f} MiB, peak PSS {r['peak_pss_mib']:.0f} MiB, "
              f"{r['peak_procs']} processes at most; pool {r['pool']}")
    if tree == ROOT:
        starts = lane_starts(args.repeats)
        summary["lane_start_s"] = {k: statistics.median(v) for k, v in starts.items()}
        print(f"{'lane':<22} {'median [s]':>11} {'min [s]':>8} {'max [s]':>8}")
        for k, v in starts.items():
            print(f"{k:<22} {statistics.median(v):>11.2f} {min(v):>8.2f} {max(v):>8.2f}")
        summary["introspection"] = introspection()
        i = summary["introspection"]
        print(f"introspection of {i['attacks']} built-in attacks: {i['cold_s']:.2f} s with an empty cache, "
              f"{i['cached_s']:.3f} s cached")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
