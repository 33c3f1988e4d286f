"""The command-line reference: every ``leakbed`` command and option, from the CLI's argparse parser."""

from __future__ import annotations

import argparse

from leakbed.cli import parser

INTRO = """# Command line

*Generated from `leakbed/cli.py`'s parser by `leakbed/reference/cli_page.py`.*
"""


def _subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:  # noqa: SLF001 - argparse has no public listing of subparsers
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return dict(action.choices)
    return {}


def _helps(p: argparse.ArgumentParser) -> dict[str, str]:
    for action in p._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return {c.dest: c.help or "" for c in action._choices_actions}  # noqa: SLF001
    return {}


def _options(sub: argparse.ArgumentParser) -> list[str]:
    lines = ["| argument | default | description |", "|---|---|---|"]
    for action in sub._actions:  # noqa: SLF001
        if isinstance(action, argparse._HelpAction):  # noqa: SLF001
            continue
        name = ", ".join(action.option_strings) or action.dest
        if action.choices:
            name += " {" + ",".join(map(str, action.choices)) + "}"
        default = "" if action.default in (None, argparse.SUPPRESS, [], False) else f"`{action.default}`"
        lines.append(f"| `{name}` | {default} | {(action.help or '').replace('|', '/')} |")
    return lines


def page() -> str:
    root = parser()
    parts = [INTRO, f"`leakbed` — {(root.description or '').strip().splitlines()[0]}", ""]
    helps = _helps(root)
    for name, sub in _subcommands(root).items():
        usage = " ".join(sub.format_usage().split())
        parts += [f"## `leakbed {name}`", "", helps.get(name, ""), "", f"```\n{usage}\n```", ""]
        parts += [*_options(sub), ""]
    return "\n".join(parts)
