"""``leakbed init [NAME] [--out PATH] [--list]``: an editable copy of a built-in config to start from.

The built-in configs ship in the package (``leakbed/configs/``) and ``leakbed run NAME`` runs one as it is; a
researcher who wants to change one asks for a copy of it in the current folder, edits it and runs the copy. A copy
never replaces a file that exists (one line, exit 2)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer

from leakbed import console
from leakbed.commands.options import flag
from leakbed.core.errors import LeakbedError
from leakbed.package_data import CONFIGS, config_names

Name = Annotated[
    str,
    typer.Argument(help="the built-in config to copy (`leakbed init --list` names them) [name]", show_default=True),
]
OutPath = Annotated[
    str | None,
    typer.Option("--out", metavar="PATH", help="where to write the copy; none: ./NAME.toml [path]", show_default=False),
]
ListThem = Annotated[bool, flag("--list", "name every built-in config with its first line, and write nothing [flag]")]


def summary(name: str) -> str:
    """A built-in config's first comment line: what it is for."""
    for line in (CONFIGS / f"{name}.toml").read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if text.startswith("#") and text.lstrip("# ").strip():
            return text.lstrip("# ").strip()
    return ""


def init(name: Name = "quickstart", out: OutPath = None, list_: ListThem = False) -> int:
    names = config_names()
    if list_:
        width = max(map(len, names))
        for each in names:
            print(f"{each:<{width}}  {summary(each)}")
        return 0
    stem = name.removesuffix(".toml")
    if stem not in names:
        raise LeakbedError(f"{name}: no built-in config of that name (one of {', '.join(names)})")
    target = Path(out) if out else Path(f"{stem}.toml")
    if target.exists() or target.is_symlink():
        raise LeakbedError(f"{target}: exists; refusing to overwrite it (--out another path)")
    if not target.parent.is_dir():
        raise LeakbedError(f"--out {target}: no such folder {target.parent}")
    shutil.copyfile(CONFIGS / f"{stem}.toml", target)
    run = "sweep" if stem.startswith("sweep-") else "run"
    shown = console.command(console.shown_path(target))
    console.say(f"wrote {shown}, a copy of the built-in config {stem}: edit it, then {console.script('leakbed')} {run} {shown}")
    return 0
