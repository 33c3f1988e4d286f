"""``leakbed``: validate an experiment, run it in the Ray simulation, write and print the report."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

import click

from leakbed import console
from leakbed.commands.app import app, command
from leakbed.core.errors import Failed, LeakbedError
from leakbed.core.plugin_text import plugin_text
from leakbed.interrupts import Interrupted, interruptible

__all__ = ["QUIET_ENV", "app", "command", "main", "refused", "usage_error"]

QUIET_ENV = {
    "FLWR_LOG_LEVEL": "ERROR",
    "GRPC_VERBOSITY": "ERROR",  # gRPC's fork notices while Ray forks next to the attack pool's channels
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_DEDUP_LOGS": "0",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "TOKENIZERS_PARALLELISM": "false",
}


def _words(values: Iterable[object]) -> str:
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
    return err.format_message().rstrip(".")


def refused(err: LeakbedError) -> int:
    """The one place a ``LeakbedError`` becomes what the user sees: bad input is ``leakbed: error: <message>`` and exit
    code 2 (``console.fail``); a ``Failed`` (it started, then failed) is ``leakbed: <what> failed: <message>`` and its
    exit code, 1. Either is the message's first line, escaped for the terminal (it may quote a plugin)."""
    if isinstance(err, Failed):
        lines = str(err).strip().splitlines()
        print(f"leakbed: {err.what} failed: {plugin_text(lines[0] if lines else '', 'console', 2000)}", file=sys.stderr)
        return err.exit_code
    return console.fail(str(err))


def main(argv: list[str] | None = None) -> int:
    """``leakbed ARGS``: the command's exit code. Every error leakbed raises on purpose is a ``LeakbedError``, mapped
    here and nowhere else (``refused``): bad input, the command's own checks or click's, is one line on stderr,
    ``leakbed: error: ...``, and exit code 2; a failure after the start is one line and exit code 1."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        with interruptible(), console.notes_in_one_line():  # SIGINT, SIGTERM, SIGHUP: what it started is stopped, then it exits
            code = command().main(args=args, prog_name="leakbed", standalone_mode=False)
    except Interrupted as err:
        print(f"leakbed: stopped by {err}: every process it started has ended", file=sys.stderr)
        return err.exit_code
    except LeakbedError as err:
        return refused(err)
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
