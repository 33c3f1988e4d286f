"""``leakbed compose [render | build | up | down]``: the deployment as containers. ``render`` prints (or writes) its
files (``leakbed.compose``); ``build`` makes the images, ``up`` and ``down`` start and stop the stack's launcher
(``leakbed.stack.ComposeLauncher``) on Docker or Podman."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import click
import typer

from leakbed import console
from leakbed.commands.options import Workers, choice, flag, text

# leakbed.compose's bounds (a test checks them); that module loads the workers package, which ``--help`` need not
MAX_SUPERNODES = 1000
FILES = ("base", "tls", "gpu", "prometheus", "seccomp")

Action = Annotated[
    str,
    typer.Argument(
        click_type=click.Choice(["render", "build", "up", "down"]),
        metavar="ACTION",
        help="render: print or --write the files; build: the images; up: build, render and start; down: remove it all "
        "[action]",
    ),
]


class Ports(click.ParamType):
    """``--ports LINK,PROM,GRAFANA``: ``stack.Stack``'s port fields."""

    name = "ports"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> dict[str, int]:
        if isinstance(value, dict):
            return value
        parts = str(value).split(",")
        if len(parts) != 3 or not all(p.strip().isdigit() and 0 < int(p) < 65536 for p in parts):
            self.fail(f"{value!r} is not three port numbers (SUPERLINK,PROMETHEUS,GRAFANA)", param, ctx)
        link, prom, graf = (int(p) for p in parts)
        return {"superlink_port": link, "prometheus_port": prom, "grafana_port": graf}


Tls = Annotated[bool, flag("--tls", "up: with the TLS overlay (certificates made in the stack's folder) [flag]")]
Base = Annotated[
    str,
    choice(["auto", "official", "local"], "build/up: Flower's official images, or local ones built from Debian packages; "
           "auto: official where a registry answers [name]"),
]  # fmt: skip
Gpu = Annotated[bool, flag("--gpu", "build/up: also build the CUDA image [flag]")]
NoBuild = Annotated[bool, flag("--no-build", "up: use the images already built [flag]")]
Plugins = Annotated[
    list[str] | None, text("build/up: install this plugin package in the app image; repeatable [path]", "PATH")
]
Project = Annotated[str, typer.Option(metavar="NAME", help="build/up/down: the compose project name [name]")]
Published = Annotated[
    dict,
    typer.Option(click_type=Ports(), metavar="LINK,PROM,GRAFANA", help="up: the host ports of the SuperLink, Prometheus "
                 "and Grafana [ports]"),
]  # fmt: skip
Engine = Annotated[
    str,
    choice(["auto", "docker", "podman"], "build/up/down: the container engine; auto: Docker where its daemon answers, "
           "else Podman (LEAKBED_ENGINE overrides) [name]"),
]  # fmt: skip
SuperNodes = Annotated[int, typer.Option(min=1, max=MAX_SUPERNODES, help="SuperNodes = users, one per partition-id [count]")]
File = Annotated[str, choice(FILES, "render: which file to print [name]")]
Write = Annotated[bool, flag("--write", "render: write every file into leakbed/deploy/ instead of printing one [flag]")]


def compose(
    action: Action = "render",
    tls: Tls = False,
    base: Base = "auto",
    gpu: Gpu = False,
    no_build: NoBuild = False,
    plugin: Plugins = None,
    project: Project = "leakbed",
    ports: Published = "9093,9090,3000",
    engine: Engine = "auto",
    supernodes: SuperNodes = 3,
    workers: Workers = 2,
    file: File = "base",
    write: Write = False,
) -> int:
    if action == "render":
        return _render(file, supernodes, workers, write)
    from leakbed import stack
    from leakbed.compose import check_counts
    from leakbed.engine import find_engine

    plugins = [Path(p) for p in plugin or []]
    check_counts(supernodes, workers)  # the templates are there
    found = find_engine(engine)
    the_stack = stack.Stack(project, supernodes, workers, tls, **ports)
    if action == "build":
        return _build(found, base, gpu, plugins)
    if action == "down":
        return _down(found, the_stack)
    stack.ComposeLauncher(found, the_stack, base=base, build=not no_build, gpu=gpu, say=console.say, plugins=plugins).start()
    _started(found, the_stack)
    return 0


def run_hint(supernodes: int, workers: int, tls: bool, connection: str = "leakbed-compose", home: Path | None = None) -> str:
    """The ``flwr run`` of the quickstart on a rendered deployment, as a command that works typed here: this
    environment's ``flwr``, leakbed's Flower app (a folder naming the installed components, written by
    ``stack.app``) as a path from here; ``home``: the FLWR_HOME to use."""
    from leakbed.compose import run_config
    from leakbed.stack import app

    words = f'{console.script("flwr")} run {console.command(console.shown_path(app()))} {connection} --stream'
    env = f"FLWR_HOME={console.command(console.shown_path(home))} " if home else ""
    return f'{env}{words} --run-config "{run_config(supernodes, workers, tls=tls)}"'


def _render(file: str, supernodes: int, workers: int, write: bool) -> int:
    from leakbed.compose import render, write_all

    if write:
        for path in write_all(supernodes, workers):
            console.say(f"wrote {path}")
    else:
        print(render(file, supernodes, workers), end="")
    if write:  # both deployments written: the TLS overlay's run also names the workers' CA
        console.say(f"with compose.tls.yml: {run_hint(supernodes, workers, tls=True)}")
    console.say(f"start a run: {run_hint(supernodes, workers, tls=file == 'tls' and not write)}")
    return 0


def _build(engine, base: str, gpu: bool, plugins: list[Path]) -> int:  # noqa: ANN001 - a leakbed.engine.Engine
    from leakbed import images

    for note in engine.notes:
        console.say(note)
    chosen, why = images.choose(base)
    console.say(f"images: {why}")
    for tag, seconds in images.build(engine, chosen, gpu=gpu, say=console.say, plugins=plugins).items():
        console.say(f"  {tag}: {seconds:.0f} s")
    return 0


def _down(engine, the_stack) -> int:  # noqa: ANN001 - a leakbed.engine.Engine, a leakbed.stack.Stack
    from leakbed import stack

    launcher = stack.ComposeLauncher(engine, the_stack)
    launcher.stop()
    if launcher.left:
        console.say(f"still there: {', '.join(launcher.left)}")
        return 1
    console.say(f"removed project {the_stack.project}: no container, network or volume left")
    return 0


def _started(engine, the_stack) -> None:  # noqa: ANN001 - a leakbed.engine.Engine, a leakbed.stack.Stack
    """What to do with a stack that is up: its dashboards, a run, its run folder, taking it down."""
    from leakbed import stack

    console.say(f"prometheus: http://127.0.0.1:{the_stack.prometheus_port} (grafana, where it runs: "
                f"http://127.0.0.1:{the_stack.grafana_port})")  # fmt: skip
    hint = run_hint(the_stack.supernodes, the_stack.workers, the_stack.tls, stack.CONNECTION, the_stack.flwr_home)
    console.say(f"start a run:  {hint}")
    if engine.name == "podman":  # Podman's CLI reads the volume itself: its API service, which ends when idle, is not needed
        copy = console.command("podman", "cp", f"{the_stack.project}-serverapp-1:/data/runs", "./runs/compose")
    else:
        compose = [console.shown_path(w) if "/" in w else w for w in engine.compose]
        copy = console.command(*compose, "-p", the_stack.project, "cp", "serverapp:/data/runs", "./runs/compose")
    console.say(f"the run folder: {copy}")
    console.say(f"stop and remove everything: {console.script('leakbed')} compose down --project {the_stack.project}")
