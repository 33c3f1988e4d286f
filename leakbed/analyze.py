"""``leakbed analyze``: argument checks and dispatch; results land in ``RUN/analyses`` and the report."""

from __future__ import annotations

import argparse
from pathlib import Path


def _ints(text: str | None, what: str) -> list[int] | None:
    if not text:
        return None
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{what}: sizes must be positive integers, got {text!r}")
    return values


def run_analysis(args: argparse.Namespace) -> Path:
    """Check every argument, open the run, run one analysis, re-write the run's report; returns the markdown file."""
    from leakbed.report import MissingMetrics, load_runs, write_report
    from studies import layers, prior_size, progress, raw_vs_update, train_size
    from studies.run_view import RunView

    if args.ranges < 1 or args.every < 1 or args.epochs < 1:
        raise ValueError("--ranges, --every and --epochs must be positive")
    sizes = _ints(args.sizes, "--sizes")
    set_sizes = _ints(args.set_sizes, "--set-sizes")
    view = RunView.open(args.run_dir, args.prior)
    try:  # a corrupt metrics.json fails now, not after the analysis has run for minutes
        report = bool(load_runs(view.run_dir))
    except MissingMetrics:
        report = False  # a partial run: its analyses stay in RUN/analyses
    out = view.run_dir / "analyses"
    name = args.analysis
    if name == "progress":
        progress.run(view, out, args.ranges)
    elif name == "train-size":
        train_size.run(view, out, sizes)
    elif name == "prior-size":
        prior_size.run(view, out, sizes, args.every)
    elif name == "layers":
        layers.run(view, out, args.every)
    else:
        raw_vs_update.run(view, out, set_sizes, args.epochs)
    if report:  # a run without per-prior metrics keeps its analyses in RUN/analyses only
        write_report(view.run_dir)
    return out / f"{name.replace('-', '_')}.md"
