"""The command-line reference: every ``leakbed`` command, argument and option, from the CLI's click command tree (the
Typer app of ``leakbed.cli``)."""

from __future__ import annotations

import click

from leakbed.cli import command
from leakbed.core.tables import markdown_table

INTRO = """# Command line

*Generated from `leakbed/cli.py`'s Typer app (its click commands) by `leakbed/reference/cli_page.py`.*

Bad input stops a command before anything starts: one line on stderr, `leakbed: error: ...`, and exit code 2.
"""


def _name(param: click.Parameter) -> str:
    if isinstance(param, click.Option):
        names = ", ".join([*param.opts, *param.secondary_opts])
        return f"{names} {param.metavar}" if param.metavar and not param.is_flag else names
    return param.human_readable_name


def _default(param: click.Parameter) -> str:
    default = param.default
    if default is None or default is False or default == () or default == [] or callable(default):
        return ""
    return f"`{default}`"


def _bound(param: click.Parameter) -> str:
    kind = param.type
    if isinstance(kind, click.Choice):
        return ", ".join(f"`{c}`" for c in kind.choices)
    if isinstance(kind, click.types._NumberRangeBase):  # noqa: SLF001 - click's base of IntRange and FloatRange
        if kind.max is None:
            return f"x {'>' if kind.min_open else '≥'} {kind.min}"
        if kind.min is None:
            return f"x {'<' if kind.max_open else '≤'} {kind.max}"
        return f"{kind.min} {'<' if kind.min_open else '≤'} x {'<' if kind.max_open else '≤'} {kind.max}"
    return ""


def _params(cmd: click.Command) -> str:
    rows = []
    for param in cmd.params:
        if isinstance(param, click.Option) and param.hidden:
            continue
        required = " (required)" if param.required else ""
        rows.append([f"`{_name(param)}`", _default(param), _bound(param), f"{param.help or ''}{required}"])
    return markdown_table(["argument", "default", "bound", "description"], rows)


def page() -> str:
    root = command()
    parts = [INTRO, f"`leakbed` — {root.help}", ""]
    for name, cmd in root.commands.items():
        # with the command's own settings, as ``make_context`` would: click caches the help option of the first
        # context that asks, and a bare one would leave ``--help`` alone as help (``-h`` then parsed as an argument)
        ctx = click.Context(cmd, info_name=f"leakbed {name}", **(cmd.context_settings or {}))
        usage = " ".join(cmd.get_usage(ctx).split())
        parts += [f"## `leakbed {name}`", "", cmd.help or "", "", f"```\n{usage}\n```", "", _params(cmd), ""]
    return "\n".join(parts)
