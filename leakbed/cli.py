"""``leakbed``: validate an experiment, run it in the Ray simulation, write and print the report."""

from __future__ import annotations

import functools
import os
import sys
import typing

import click
import typer
import typer.core
from typer.models import ArgumentInfo

from leakbed import console
from leakbed.commands import analyze, compose, deploy, run, sandbox, sweep

QUIET_ENV = {
    "FLWR_LOG_LEVEL": "ERROR",
    "GRPC_VERBOSITY": "ERROR",  # gRPC's fork notices while Ray forks next to the attack pool's channels
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_DEDUP_LOGS": "0",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "TOKENIZERS_PARALLELISM": "false",
}


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


app = typer.Typer(
    name="leakbed",
    help="validate an experiment, run it in the Ray simulation, write and print the report",
    cls=Group,
    add_completion=False,
    rich_markup_mode=None,  # the helps' units are in brackets, which rich would read as markup
    pretty_exceptions_enable=False,
    suggest_commands=False,  # click suggests the closest command itself
    context_settings={"help_option_names": ["-h", "--help"]},
)

# name, the function, its help, its click context settings: ``leakbed --help`` lists them in this order
COMMANDS = (
    ("run", run.run, "run an experiment in the Ray simulation", {}),
    ("validate", run.validate, "check a config and its data, print the frozen config", {}),
    ("sweep", sweep.sweep, "run a grid of variants (e.g. defense strengths); resumable; privacy-utility report", {}),
    ("attack-worker", sandbox.attack_worker, "a remote attack worker: mutual TLS on TCP, the attack code in the sandbox", {}),
    ("sandbox-run", sandbox.sandbox_run, "run a program in exactly the sandbox an attack's lane gets, over a store folder",
     sandbox.SANDBOX_RUN_SETTINGS),
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
    app.command(_name, help=_help, short_help=_help, cls=Command, context_settings=_settings or None)(_function)


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


def _words(values: typing.Iterable[object]) -> str:
    values = [str(v) for v in values]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def _bound(kind: click.ParamType) -> str:
    """A range type's bound in words: ``64..1048576``, ``at least 1``."""
    assert isinstance(kind, click.types._NumberRangeBase)  # noqa: SLF001 - click's base of IntRange and FloatRange
    lo, hi = kind.min, kind.max
    if lo is not None and hi is not None and not kind.min_open and not kind.max_open:
        return f"{lo}..{hi}"
    low = f"{'more than' if kind.min_open else 'at least'} {lo}" if lo is not None else ""
    high = f"{'less than' if kind.max_open else 'at most'} {hi}" if hi is not None else ""
    return " and ".join(w for w in (low, high) if w)


def usage_error(err: click.UsageError) -> str:
    """Click's usage error as one line: a value out of its range or choices names the option, its bound and the value
    given (``--memory-mb must be 64..1048576, got 1``); others as click words them."""
    if isinstance(err, click.BadParameter) and not isinstance(err, click.MissingParameter):
        param = err.param
        name = (param.opts[0] if param.opts and isinstance(param, click.Option) else param.human_readable_name) if param else ""
        name = name or str(err.param_hint or "")
        message = err.message.rstrip(".")
        kind = param.type if param else None
        if isinstance(kind, click.types._NumberRangeBase) and " is not in the range " in message:  # noqa: SLF001
            return f"{name} must be {_bound(kind)}, got {message.split(' is not in the range ')[0]}"
        if isinstance(kind, click.Choice) and " is not " in message:
            return f"{name} must be {_words(kind.choices)}, got {message.split(' is not ')[0]}"
        return f"{name}: {message}" if name else message
    return err.format_message()


def main(argv: list[str] | None = None) -> int:
    """``leakbed ARGS``: the command's exit code; bad input (the command's own checks, or click's) is one line on
    stderr, ``leakbed: error: ...``, and exit code 2."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        code = command().main(args=args, prog_name="leakbed", standalone_mode=False)
    except click.UsageError as err:
        return console.fail(usage_error(err))
    except click.ClickException as err:
        console.fail(err.format_message())
        return err.exit_code
    except click.exceptions.Abort:
        print("leakbed: aborted", file=sys.stderr)
        return 130
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
