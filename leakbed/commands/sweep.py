"""``leakbed sweep`` and ``open-world-sweep``: many runs of one config, resumable, with one report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import click
import typer

from leakbed import console
from leakbed.commands import experiment
from leakbed.commands.options import Config, RayAddress, ResumableOut, Sets, SweepConfig
from leakbed.core.config import ConfigError, load_config
from leakbed.core.paths import default_run_dir
from leakbed.package_data import config_file

Grid = Annotated[
    list[str] | None,
    typer.Option(
        "--grid",
        metavar="KEY=V1,V2,...",
        help="an axis of the grid, e.g. defenses.0.strength=0,0.5,1; repeatable: the points are every combination "
        "[key=values]",
        show_default=False,
    ),
]
Seen = Annotated[
    str, typer.Option("--seen", metavar="S1,S2,...", help="the shares of seen users, each in [0, 1], distinct [fractions]")
]
OpenWorldPrior = Annotated[
    str, typer.Option(click_type=click.Choice(["chrono", "random"]), help="the one FL run's prior rule [name]")
]


def sweep(
    config: SweepConfig = None, grid: Grid = None, set_: Sets = None, out: ResumableOut = None, ray_address: RayAddress = None
) -> int:
    import json

    from leakbed.core.config import read_tree
    from leakbed.sweep import (
        extends,
        grid_points,
        is_sweep_file,
        parse_grid,
        read_sweep_file,
        run_sweep,
        sweep_spec,
        write_sweep_report,
    )

    path = config_file(config)
    base, sets, grids = read_sweep_file(path) if is_sweep_file(path) else (read_tree(path), [], [])
    if not grids and not grid:
        raise ConfigError("sweep: give --grid KEY=V1,V2,... or a sweep file with [[sweep.grid]] entries")
    points = grid_points(base, [*sets, *(set_ or []), *experiment.ray_set(ray_address)], parse_grid(grid or []), grids)
    first = next(iter(points.values()))
    folder = Path(out) if out else default_run_dir(first.name + "-sweep")
    spec = {"config": config, "points": sweep_spec(points)}
    saved = folder / "sweep.json"
    if saved.exists() and not extends(json.loads(saved.read_text()).get("points"), spec["points"]):
        raise ConfigError(f"--out {folder}: holds a different sweep ({saved}); refusing to mix them")
    if not saved.exists() and folder.exists() and any(folder.iterdir()):
        raise ConfigError(f"--out {folder}: folder exists, is not empty and is not a sweep")
    points = {key: experiment.preflight(cfg) for key, cfg in points.items()}
    from leakbed.simulate import simulation_link

    folder.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(spec, indent=2))
    with console.progress() as bar, simulation_link(first, folder / "logs") as link:  # one SuperLink and Ray head for all
        ran = run_sweep(points, folder, lambda cfg, f: experiment.run_experiment(cfg, f, bar, f"{f.name}: ", link))
    report = write_sweep_report(points, folder)
    print(f"ran {len(ran)} of {len(points)} points ({len(points) - len(ran)} reused); report: {report}")
    return 0


def open_world_sweep(
    config: Config = None, set_: Sets = None, seen: Seen = "0,0.25,0.5,0.75,1", prior: OpenWorldPrior = "chrono",
    out: ResumableOut = None,
) -> int:  # fmt: skip
    from leakbed.studies.open_world_sweep import parse_seen, run_sweep, sweep_config

    shares = parse_seen(seen)
    cfg = sweep_config(load_config(config_file(config), set_ or []), prior)
    folder = Path(out) if out else default_run_dir(cfg.name + "-open-world")
    if folder.exists() and any(folder.iterdir()) and not (folder / "run").is_dir():
        raise ConfigError(f"--out {folder}: folder exists, is not empty and is not an open-world sweep")
    cfg = experiment.preflight(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    with console.progress() as bar:
        report = run_sweep(cfg, prior, shares, folder, lambda c, f: experiment.run_experiment(c, f, bar))
    print(f"report: {report}")
    return 0
