"""The Typer app of ``leakbed``: every command of ``leakbed.commands``, in the order ``leakbed --help`` lists them,
and its click command tree (what ``leakbed.cli.main`` runs and the reference page documents)."""

from __future__ import annotations

import functools
import typing

import click
import typer
import typer.core
from typer.models import ArgumentInfo

from leakbed.commands import analyze, compose, deploy, init, plugins, run, sandbox, sweep


class _PlainHelp:
    """Help as plain text: Typer escapes the ``[`` of ``[default: ...]`` for rich even where it prints without rich."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_help(ctx, formatter)  # type: ignore[misc]
        formatter.buffer[:] = [text.replace("\\[", "[") for text in formatter.buffer]

    def format_arguments(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Nothing: Typer's ``format_options`` lists the arguments (click 8.5 would list them a second time)."""


class Command(_PlainHelp, typer.core.TyperCommand):
    pass


class Group(_PlainHelp, typer.core.TyperGroup):
    pass


# every command declares its help names itself: click caches a command's help option the first time a context asks
# for it, and a context made without the group's (the CLI reference page's) would fix it at ``--help`` alone
HELP = {"help_option_names": ["-h", "--help"], "max_content_width": 120}

app = typer.Typer(
    name="leakbed",
    help="validate an experiment, run it in the Ray simulation, write and print the report",
    cls=Group,
    add_completion=False,
    rich_markup_mode=None,  # the helps' units are in brackets, which rich would read as markup
    pretty_exceptions_enable=False,
    suggest_commands=False,  # click suggests the closest command itself
    context_settings=HELP,
)

# name, the function, its help, its click context settings: ``leakbed --help`` lists them in this order
COMMANDS = (
    ("run", run.run, "run an experiment in the Ray simulation", {}),
    ("validate", run.validate, "check a config and its data, print the frozen config", {}),
    ("init", init.init, "write an editable copy of a built-in config to start from; --list names them", {}),
    ("sweep", sweep.sweep, "run a grid of variants (e.g. defense strengths); resumable; privacy-utility report", {}),
    ("attack-worker", sandbox.attack_worker, "a remote attack worker: mutual TLS on TCP, the attack code in the sandbox", {}),
    ("sandbox-run", sandbox.sandbox_run, "run a program in exactly the sandbox an attack's lane gets, over a store folder",
     sandbox.SANDBOX_RUN_SETTINGS),
    ("plugins", plugins.plugins, "list installed plugin distributions and what of them runs outside any sandbox", {}),
    ("deploy-local", deploy.deploy_local, "TLS SuperLink, a SuperNode per user, attack workers, flwr run: local processes",
     {}),
    ("open-world-sweep", sweep.open_world_sweep,
     "open-world re-identification and matching vs share of seen users (Figure 6)", {}),
    ("feature-inference", run.feature_inference,
     "leakbed run with the suite feature-inference, dlg, inverting-gradients (seed 004 Table 1)", {}),
    ("analyze", analyze.analyze,
     "analyses of a finished run: layers, progress, prior-size, train-size, raw-vs-update", {}),
    ("report", run.report, "re-write the report of a finished run", {}),
    ("compose", compose.compose, "the deployment as containers: render its files; build, up, down", {}),
)  # fmt: skip
for _name, _function, _help, _settings in COMMANDS:
    app.command(_name, help=_help, short_help=_help, cls=Command, context_settings={**HELP, **_settings})(_function)


@functools.cache
def command() -> click.Group:
    """The click group of ``app`` (every command, argument and option, as the reference page reads them)."""
    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    for info in app.registered_commands:  # Typer 0.20 sets an Argument's help before click 8.5's __init__ clears it
        hints = typing.get_type_hints(info.callback, include_extras=True)
        for param in group.commands[info.name].params:
            metadata = getattr(hints.get(param.name), "__metadata__", ())
            found = [m.help for m in metadata if isinstance(m, ArgumentInfo) and m.help]
            if isinstance(param, click.Argument) and found and not getattr(param, "help", None):
                param.help = found[0]
    return group
