"""Shared pieces of the benchmarks: quiet environment, config, output folder, round marks, tables.

Nothing here imports Flower at module level: the scripts set the quiet environment first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from leakbed.cli import QUIET_ENV as CLI_QUIET_ENV

QUIET_ENV = {**CLI_QUIET_ENV, "FLWR_LOG_LEVEL": "WARNING"}  # leakbed run's, with Flower's warnings kept


def quiet_env() -> None:
    """Set the quiet environment (unless already set) before anything imports Flower."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="experiment TOML to start from (default: built-in defaults)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra config override, applied last (repeatable), e.g. workers.count=1",
    )
    p.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    p.add_argument("--rule", default="random", choices=["random", "chrono"], help="prior rule of the run (default random)")
    p.add_argument("--out", help="folder for run outputs and summary.json (default: a temp dir, removed at the end)")
    p.add_argument("--interval", type=float, default=0.2, help="RSS sampling interval [s] (default 0.2)")
    p.add_argument(
        "--pss-interval", type=float, default=5.0, help="PSS sampling interval [s]; reading PSS is costly; 0 = off (default 5)"
    )


@contextlib.contextmanager
def out_dir(arg: str | None, prefix: str) -> Iterator[Path]:
    """``--out`` (kept), or a temp dir removed afterwards."""
    if arg:
        path = Path(arg)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def fresh(path: Path) -> Path:
    """A run folder that must not hold an earlier run's files (metrics.json would be misread)."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


# the phases benchmarks.cohort's memory sampler tells apart: the attack fit after the last round
# grows with the users the attacker knows, the rounds with the clients
ROUNDS_PHASE, AFTER_PHASE = "federation", "after the last round"


class RoundMarks:
    """Wall-clock marks at the end of each round (after the server's evaluation hook), round 0 = before round 1."""

    def __init__(self) -> None:
        self.perf: dict[int, float] = {}
        self.wall: dict[int, float] = {}

    def __call__(self, rnd: int, *_: object) -> None:
        self.perf[rnd] = time.perf_counter()
        self.wall[rnd] = time.time()

    def split(self, rounds: int) -> dict[str, float | None]:
        """Round 1 (includes Ray actor start-up) and the mean of rounds 2..R (steady state)."""
        p = self.perf
        first = p[1] - p[0] if 0 in p and 1 in p else None
        steady = (p[rounds] - p[1]) / (rounds - 1) if rounds > 1 and 1 in p and rounds in p else None
        return {"round1_s": first, "steady_round_s": steady}


def pool_timeline(store: Path, marks: RoundMarks, rounds: int) -> dict[str, float | int | None]:
    """The attack pool's staleness, from the store's file times and the FL round marks.

    A round's shadow file is written when the pool finished that round's shadow updates; its lag
    is the number of FL rounds that ended between the round's start and that moment (0: done
    within its own round; 1: done while the next round ran). The pool's own ``max_lag_rounds``
    counts something else: the rounds still outstanding when a new round is submitted. It misses
    work finishing after the last round, and with two workers rounds finish out of order (round
    3 after round 4), so it can read 1 where a round's shadow updates were 2 rounds late.
    Also: how long the pool was still writing after the last FL round ended.
    """
    shadow = {int(f.stem[1:]): f.stat().st_mtime for f in (store / "shadow").glob("r*.npz")}
    files = [f.stat().st_mtime for kind in ("shadow", "anon", "global") for f in (store / kind).glob("r*.npz")]
    ends = sorted(t for r, t in marks.wall.items() if r >= 1)
    lags = {r: sum(1 for t in ends if marks.wall.get(r - 1, 0.0) < t < done) for r, done in shadow.items()}
    fl_end = marks.wall.get(rounds)
    return {
        "shadow_rounds_written": len(shadow),
        "max_lag_rounds_from_files": max(lags.values(), default=None),
        "pool_busy_after_fl_s": max(0.0, max(files) - fl_end) if files and fl_end else None,
    }


def median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def fmt(value: object, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def table(header: list[str], rows: list[list[object]]) -> str:
    cells = [header] + [[fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_config(title: str, settings: dict, cfg_toml: str) -> None:
    print(f"== {title}")
    for k, v in settings.items():
        print(f"  {k}: {v}")
    print("-- full experiment config (TOML):")
    print(cfg_toml.rstrip())
    print("--", flush=True)


def finish(out: Path, keep: bool, summary: dict) -> None:
    """Write summary.json (when --out was given) and print the one-line JSON summary last."""
    line = json.dumps(summary, default=float, separators=(",", ":"))
    if keep:
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    print(line, flush=True)


def run_starts(run_dir: Path, rule: str) -> int:
    """How many times ``leakbed.simulate`` started the prior's run (it starts one again when Ray failed to come
    up): each start is one "Successfully started run" of its ``flwr run`` log."""
    log = run_dir / "logs" / f"flwr-run-{rule}.log"
    return log.read_text(errors="replace").count("Successfully started run") if log.exists() else 0
