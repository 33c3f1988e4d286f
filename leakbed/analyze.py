"""``leakbed analyze``: argument checks and dispatch; results land in ``RUN/analyses`` and the report."""

from __future__ import annotations

from pathlib import Path

from leakbed.core.config import ConfigError


def _ints(text: str | None, what: str) -> list[int] | None:
    if not text:
        return None
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ConfigError(f"{what}: sizes must be positive integers, got {text!r}")
    return values


ANALYSES = ("layers", "progress", "prior-size", "train-size", "raw-vs-update")


def run_analysis(
    name: str,
    run_dir: str | Path,
    prior: str | None = None,
    ranges: int = 10,
    sizes: str | None = None,
    every: int = 1,
    set_sizes: str | None = None,
    epochs: int = 20,
) -> Path:
    """Check the sizes, open the run, run the analysis ``name`` (one of ``ANALYSES``; the counts are positive, as the
    CLI's bounds make them), re-write the run's report; returns the markdown file."""
    from leakbed.report import MissingMetrics, load_runs, write_report
    from leakbed.studies import layers, prior_size, progress, raw_vs_update, train_size
    from leakbed.studies.run_view import RunView

    sizes_ = _ints(sizes, "--sizes")
    set_sizes_ = _ints(set_sizes, "--set-sizes")
    view = RunView.open(run_dir, prior)
    try:  # a corrupt metrics.json fails now, not after the analysis has run for minutes
        report = bool(load_runs(view.run_dir))
    except MissingMetrics:
        report = False  # a partial run: its analyses stay in RUN/analyses
    out = view.run_dir / "analyses"
    if name == "progress":
        progress.run(view, out, ranges)
    elif name == "train-size":
        train_size.run(view, out, sizes_)
    elif name == "prior-size":
        prior_size.run(view, out, sizes_, every)
    elif name == "layers":
        layers.run(view, out, every)
    else:
        raw_vs_update.run(view, out, set_sizes_, epochs)
    if report:  # a run without per-prior metrics keeps its analyses in RUN/analyses only
        write_report(view.run_dir)
    return out / f"{name.replace('-', '_')}.md"
