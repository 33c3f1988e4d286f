"""The scale benchmark (issue 14.2): 100, 300 and 1,000 synthetic clients, C = 0.1, 5 rounds, attack pool on.

``python -m benchmarks.scale [--users 100,300,1000] [--fraction 0.1] [--rounds 5] [--client-gpus 0]
[--device auto] [--out DIR] [cohort options, e.g. --set workers.count=1 --seed 0]``

Each cohort size is one ``benchmarks.cohort`` run (one leakbed run: curious strategy, shuffler,
attack pool with one shadow update per known user and round, referee, attack fitting) in a fresh
Python process, so every size measures its own process tree from a cold start: wall time per
round (round 1 includes Ray's actor start-up; "steady" is the mean of rounds 2..R), peak PSS of
the tree (PSS splits shared pages between processes: the closer figure for the machine's real
use; RSS is shown beside it), the attack pool's lag in rounds (from the store's file times: how
many FL rounds ended before a round's shadow updates were written) and whether anything was
dropped or failed. The machine's 1-minute load average before and after each size is printed
beside it, since timings on a shared machine mean little without it.

Goals (issue 14.2): peak PSS at the largest size within 1.25x of the smallest, pool lag at most 1
round, nothing dropped. The last line is JSON (``"goals"`` holds the verdicts).

``--client-gpus`` sets ``simulation.client_gpus`` (the GPU fraction each Ray ClientApp actor
reserves) and ``--device`` the torch device; asking for a GPU where CUDA is missing stops with
a one-line error before anything starts (Ray would otherwise wait forever for a GPU actor slot).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import AFTER_PHASE, ROUNDS_PHASE, fmt, quiet_env, table

quiet_env()  # before anything imports flwr

DEFAULTS = {"users": "100,300,1000", "fraction": 0.1, "rounds": 5}
GOALS = {"memory_ratio": 1.25, "max_lag_rounds": 1}
STARTUP_TIMEOUT = 1200  # fl.startup_timeout [s] of each run (the default 300 s fails runs on a heavily loaded host)


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Scale options; everything else goes to each ``benchmarks.cohort`` run unchanged."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.split("\n\n")[0], add_help=False)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("--users", default=DEFAULTS["users"], help="cohort sizes, comma-separated (default 100,300,1000)")
    p.add_argument("--fraction", type=float, default=DEFAULTS["fraction"], help="clients per round C (default 0.1)")
    p.add_argument("--rounds", type=int, default=DEFAULTS["rounds"], help="FL rounds (default 5)")
    p.add_argument("--client-gpus", type=float, default=0.0, help="GPU fraction per Ray client actor (default 0)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="torch device (default auto)")
    p.add_argument("--out", help="keep each size's run and summary.json under DIR/users-N (default: temp, removed)")
    return p.parse_known_args(argv)


def sizes(text: str) -> list[int]:
    """``"100,300,1000"`` -> [100, 300, 1000]; each at least 2."""
    try:
        out = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--users {text!r}: comma-separated integers") from None
    if not out or min(out) < 2:
        raise ValueError(f"--users {text!r}: at least one size, each >= 2")
    return out


def cohort_argv(users: int, args: argparse.Namespace, rest: list[str], out: Path) -> list[str]:
    """The ``benchmarks.cohort`` command line of one size (GPU settings as config overrides)."""
    argv = ["--users", str(users), "--fraction", str(args.fraction), "--rounds", str(args.rounds), "--out", str(out)]
    argv += ["--set", f"simulation.client_gpus={args.client_gpus}", "--set", f"device={args.device}"]
    argv += ["--set", f"fl.startup_timeout={STARTUP_TIMEOUT}"]  # a loaded machine can take minutes to start Ray's actors
    return argv + rest


def check_gpus(args: argparse.Namespace) -> str | None:
    """A one-line reason why the GPU settings cannot run here, or None."""
    if args.client_gpus <= 0 and args.device != "cuda":
        return None
    import torch

    if not torch.cuda.is_available():
        return f"--client-gpus {args.client_gpus} / --device {args.device}: no CUDA device on this machine"
    return None


def run_size(users: int, args: argparse.Namespace, rest: list[str], root: Path) -> dict:
    """One cohort in its own process (its output streams through); its summary plus the load around it."""
    out = root / f"users-{users}"
    argv = [sys.executable, "-m", "benchmarks.cohort", *cohort_argv(users, args, rest, out)]
    print(f"\n##### {users} clients: {' '.join(argv[1:])}", flush=True)
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    code = subprocess.call(argv)
    wall = time.perf_counter() - t0
    load_after = os.getloadavg()[0]
    path = out / "summary.json"
    summary = json.loads(path.read_text()) if path.exists() else {"ok": False, "users": users}
    return summary | {"exit_code": code, "process_s": wall, "load_before": load_before, "load_after": load_after}


def _phase_pss(r: dict, phase: str) -> float | None:
    return (r.get("peak_tree_pss_mib_by_phase") or {}).get(phase)


def goals(results: list[dict]) -> dict:
    """The issue's three goals over all sizes: flat memory, pool lag <= 1 round, nothing dropped or failed."""
    done = [r for r in results if r.get("peak_tree_pss_mib")]
    first, last = (done[0], done[-1]) if done else ({}, {})
    ratio = last["peak_tree_pss_mib"] / first["peak_tree_pss_mib"] if len(done) > 1 else None
    lags = [r["pool"].get("max_lag_rounds_from_files") for r in results if "pool" in r]
    lag = max((x for x in lags if x is not None), default=None)
    lost = sum(r["pool"]["dropped"] + r["pool"]["failed"] for r in results if "pool" in r)
    fed = [_phase_pss(r, ROUNDS_PHASE) for r in (first, last)]
    return {
        "memory_ratio": ratio,
        # the peak while the federation runs (Flower, clients, tap, shadow updates), apart from the
        # attack fit after the last round, whose training set grows with the users the attacker knows
        "federation_memory_ratio": fed[1] / fed[0] if len(done) > 1 and all(fed) else None,
        "memory_ratio_between": [first.get("users"), last.get("users")],
        "memory_flat": ratio is not None and ratio <= GOALS["memory_ratio"],
        "max_lag_rounds": lag,
        "lag_ok": lag is not None and lag <= GOALS["max_lag_rounds"],
        "dropped_or_failed": lost,
        "nothing_dropped": lost == 0 and all(r.get("ok") for r in results),
    }


def main(argv: list[str] | None = None) -> int:
    args, rest = parse(sys.argv[1:] if argv is None else argv)
    if args.help:
        print(__doc__)
        from benchmarks import cohort

        return cohort.main(["--help"])
    try:
        users = sizes(args.users)
    except ValueError as err:
        print(f"benchmarks.scale: error: {err}", file=sys.stderr)
        return 2
    reason = check_gpus(args)
    if reason:
        print(f"benchmarks.scale: error: {reason}", file=sys.stderr)
        return 2
    print(f"== benchmarks.scale: sizes {users}, C = {args.fraction}, {args.rounds} rounds, host CPUs {os.cpu_count()}")
    with tempfile.TemporaryDirectory(prefix="leakbed-scale-") as tmp:
        root = Path(args.out) if args.out else Path(tmp)
        results = [run_size(n, args, rest, root) for n in users]

    base = next((r["peak_tree_pss_mib"] for r in results if r.get("peak_tree_pss_mib")), None)
    rows = []
    for r in results:
        pool, pss = r.get("pool", {}), r.get("peak_tree_pss_mib")
        rows.append(
            [
                r["users"],
                max(int(r["users"] * args.fraction), 1),
                r.get("whole_s"),
                r.get("round1_s"),
                r.get("steady_round_s"),
                r.get("per_round_s"),
                pss,
                pss / base if pss and base else None,
                _phase_pss(r, ROUNDS_PHASE),
                _phase_pss(r, AFTER_PHASE),
                r.get("peak_tree_rss_mib"),
                pool.get("max_lag_rounds_from_files"),
                pool.get("max_lag_rounds"),
                f"{pool.get('tapped', '-')}/{pool.get('analysed', '-')}/{pool.get('dropped', '-')}/{pool.get('failed', '-')}",
                f"{r['load_before']:.1f}/{r['load_after']:.1f}",
                r.get("starts"),
                "yes" if r.get("ok") else "NO",
            ]
        )
    header = [
        "clients",
        "per round",
        "whole [s]",
        "round 1 [s]",
        "steady round [s]",
        "FL s/round",
        "peak PSS [MiB]",
        "PSS / first",
        "peak PSS in rounds [MiB]",
        "peak PSS after [MiB]",
        "peak RSS [MiB]",
        "lag (files)",
        "lag (pool)",
        "tapped/analysed/dropped/failed",
        "load 1m before/after",
        "starts",
        "ok",
    ]
    print("\n== scale: one leakbed run per cohort size, each in a fresh process")
    print(table(header, rows))
    verdict = goals(results)
    print(
        f"goals: memory {fmt(verdict['memory_ratio'])}x (<= {GOALS['memory_ratio']}: {verdict['memory_flat']}; "
        f"during the rounds {fmt(verdict['federation_memory_ratio'])}x), "
        f"pool lag {fmt(verdict['max_lag_rounds'])} round(s) (<= {GOALS['max_lag_rounds']}: {verdict['lag_ok']}), "
        f"dropped or failed {verdict['dropped_or_failed']} (none: {verdict['nothing_dropped']})"
    )
    keys = (
        "users",
        "ok",
        "starts",
        "whole_s",
        "round1_s",
        "steady_round_s",
        "per_round_s",
        "round_s",
        "peak_tree_pss_mib",
        "peak_tree_pss_mib_by_phase",
    )
    summary = {
        "benchmark": "scale",
        "fraction": args.fraction,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "sizes": [
            {k: r.get(k) for k in keys}
            | {"peak_tree_rss_mib": r.get("peak_tree_rss_mib"), "pool": r.get("pool")}
            | {"load": [r["load_before"], r["load_after"]]}
            for r in results
        ],
        "goals": verdict,
    }
    print(json.dumps(summary, default=float, separators=(",", ":")), flush=True)
    return 0 if all(r.get("ok") and r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
