"""``leakbed analyze``: seed 001 §6.2 / seed 000 §6.1.7 analyses of a finished run, written into ``RUN/analyses``
and its report."""

from __future__ import annotations

from typing import Annotated

import click
import typer

from leakbed.analyze import ANALYSES
from leakbed.commands.options import RunDir

Analysis = Annotated[
    str,
    typer.Argument(
        click_type=click.Choice(ANALYSES), metavar="ANALYSIS", help=f"{', '.join(ANALYSES)} [name]", show_default=False
    ),
]


def analyze(
    analysis: Analysis,
    run_dir: RunDir,
    prior: Annotated[str | None, typer.Option(metavar="NAME", help="which prior's run; none: the first [name]")] = None,
    ranges: Annotated[int, typer.Option(min=1, help="progress: round ranges per axis [count]")] = 10,
    sizes: Annotated[str | None, typer.Option(metavar="N1,N2,...", help="prior-size / train-size: the sizes, "
                                              "e.g. 1,2,4,8; none: the study's own [count]")] = None,
    every: Annotated[int, typer.Option(min=1, help="layers / prior-size: replay every k-th stored round [rounds]")] = 1,
    set_sizes: Annotated[str | None, typer.Option("--set-sizes", metavar="N1,N2,...", help="raw-vs-update: images per "
                                                  "set, e.g. 2,4,8,16; none: the study's own [count]")] = None,
    epochs: Annotated[int, typer.Option(min=1, help="raw-vs-update: epochs of the raw-image classifier [epochs]")] = 20,
) -> int:  # fmt: skip
    from leakbed.analyze import run_analysis

    md = run_analysis(analysis, run_dir, prior, ranges, sizes, every, set_sizes, epochs)
    print(md.read_text())
    print(f"written: {md} (and the run's report.md)")
    return 0
