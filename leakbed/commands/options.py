"""The arguments and options several commands share, declared once; each help ends with its unit in brackets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import click
import typer
from typer.models import OptionInfo


def text(help: str, metavar: str) -> OptionInfo:
    """An option holding a string, e.g. a path, with no default shown."""
    return typer.Option(metavar=metavar, help=help, show_default=False)


def flag(name: str, help: str) -> OptionInfo:
    """An on/off option: ``name`` turns it on (there is no ``--no-`` form)."""
    return typer.Option(name, help=help)


def choice(values: Sequence[str], help: str) -> OptionInfo:
    """An option whose value is one of ``values``."""
    return typer.Option(click_type=click.Choice(list(values)), help=help)


# an experiment config or a finished run
Config = Annotated[
    str | None,
    typer.Argument(
        help="experiment TOML, or a built-in config by name (`leakbed init --list`); none: the built-in defaults [path]",
        show_default=False,
    ),
]
SweepConfig = Annotated[
    str | None,
    typer.Argument(
        help="experiment TOML, or a sweep file ([sweep] with config, set, [[sweep.grid]]), or a built-in one by name "
        "(`leakbed init --list`); none: the built-in defaults [path]",
        show_default=False,
    ),
]
RunDir = Annotated[str, typer.Argument(help="a finished run folder (holds config.toml) [path]", show_default=False)]

# overriding the config
Sets = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="override a config field, e.g. fl.rounds=5; repeatable, applied in order (a sweep: to every point) "
        "[key=value]",
        show_default=False,
    ),
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        metavar="HOST:PORT",
        help="join this running Ray cluster (its head's GCS address) instead of a private local Ray; the last "
        "override, simulation.ray_address [host:port]",
    ),
]

# where results go
Out = Annotated[
    str | None,
    typer.Option(
        "--out",
        metavar="DIR",
        help="the output folder (must be new or empty); none: a new one under $LEAKBED_HOME/runs (default ./runs) [path]",
    ),
]
NoiseFrom = Annotated[
    str | None,
    typer.Option(
        "--noise-from",
        metavar="RUN_DIR",
        help="reproduce a finished run's DP noise exactly: each prior's noise secret its referee kept (run it with the "
        "same config) [path]",
        show_default=False,
    ),
]
ResumableOut = Annotated[
    str | None,
    typer.Option(
        "--out",
        metavar="DIR",
        help="the sweep folder; one holding the same sweep is resumed, its finished runs reused; none: a new one "
        "under $LEAKBED_HOME/runs (default ./runs) [path]",
    ),
]

# the attack side's sandbox
MemoryMb = Annotated[
    int, typer.Option("--memory-mb", min=64, max=1 << 20, help="the sandbox's RLIMIT_DATA: heap and anonymous mappings [MiB]")
]

# a deployment
Workers = Annotated[int, typer.Option("--workers", min=1, max=64, help="attack workers [count]")]
