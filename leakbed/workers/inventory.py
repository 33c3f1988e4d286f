"""What is installed: each plugin distribution (``leakbed.attacks`` and ``leakbed.defenses``), and what of it runs
outside any sandbox.

A sandbox runs an attack's code, but some of a distribution's files run in every Python process of the environment
before leakbed can confine anything: a ``.pth`` file's ``import`` lines run at every interpreter start, and a folder a
``.pth`` adds to ``sys.path`` that holds ``sitecustomize``/``usercustomize`` is imported at start too. Files of a
distribution outside the environment (an editable install's source folder), and links among its files (which the
staging leaves out), are listed so a user knows what they installed. Read from the installed metadata as data:
nothing of a plugin is imported or run here. ``leakbed plugins`` prints it; a run warns once about the first kind.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib.metadata import Distribution, entry_points
from pathlib import Path
from typing import TextIO

from leakbed.core.plugin_text import plugin_text
from leakbed.workers.staging import BUILTIN, Layout, StagingError, layout, normalized, read

GROUPS = {"leakbed.attacks": "attacks", "leakbed.defenses": "defenses"}
STARTUP = ("sitecustomize.py", "usercustomize.py")  # what Python imports at start from any folder on sys.path
WARNED = "LEAKBED_PTH_WARNED"  # set once warned: the processes a run starts inherit it and warn no more


@dataclass(frozen=True)
class Installed:
    """One installed plugin distribution, as trusted code reads its metadata."""

    name: str
    version: str
    editable: bool
    entry_points: tuple[tuple[str, str, str], ...]  # (group, name, value)
    pth: tuple[str, ...]  # the .pth files it ships
    pth_code: tuple[str, ...]  # those that run code at every start
    startup: tuple[str, ...]  # sitecustomize/usercustomize in a folder its .pth adds to sys.path
    pth_paths: tuple[str, ...]  # the folders its .pth files add to sys.path
    links: tuple[str, ...]  # links among its files (left out of its staged copy)
    outside: tuple[str, ...]  # its files outside the environment
    problems: tuple[str, ...]  # why its code cannot be staged

    def names(self, group: str) -> list[str]:
        return sorted(n for g, n, _ in self.entry_points if g == group)

    @property
    def runs_at_start(self) -> tuple[str, ...]:
        """What of it Python runs at every start, outside any sandbox."""
        return (*self.pth_code, *self.startup)


def _dists() -> dict[str, Distribution]:
    found: dict[str, Distribution] = {}
    for group in GROUPS:
        for ep in entry_points(group=group):
            if ep.dist is not None:
                name = normalized(ep.dist.metadata["Name"] or "?")
                if name != BUILTIN:
                    found.setdefault(name, ep.dist)
    return found


def _startup(lay: Layout) -> tuple[str, ...]:
    return tuple(str(Path(p) / f) for p in lay.pth_paths for f in STARTUP if os.path.lexists(Path(p) / f))


def describe(dist: Distribution, links: bool = True) -> Installed:
    """``dist`` as ``leakbed plugins`` shows it; ``links``: also read its files for links (what staging reads)."""
    lay = layout(dist)
    found, problems = [], list(lay.problems)
    if links:
        try:
            found = [s for s in read(lay, dist).skipped if "link" in s]
        except StagingError as err:
            problems.append(str(err))
        except OSError as err:
            problems.append(f"{err.filename}: {err.strerror}")
    eps = tuple(sorted((ep.group, ep.name, ep.value) for ep in dist.entry_points if ep.group in GROUPS))
    return Installed(lay.name, lay.version, lay.editable, eps, lay.pth, lay.pth_code, _startup(lay), lay.pth_paths,
                     tuple(found), lay.outside, tuple(dict.fromkeys(problems)))  # fmt: skip


def installed(links: bool = True) -> list[Installed]:
    """Every installed plugin distribution (leakbed's own aside), by name."""
    return [describe(dist, links) for _, dist in sorted(_dists().items())]


def warn_once(stream: TextIO | None = None) -> None:
    """Warn, once per run (its processes inherit ``LEAKBED_PTH_WARNED``), about each installed plugin that ships a
    ``.pth`` running code at every start: that code is outside any sandbox. A ``.pth`` that only adds a folder (a
    plain editable install) runs nothing and is listed by ``leakbed plugins`` only."""
    if os.environ.get(WARNED):
        return
    os.environ[WARNED] = "1"
    out = stream or sys.stderr
    for dist in installed(links=False):
        if dist.runs_at_start:
            what = ", ".join(plugin_text(p, "console", 120) for p in dist.runs_at_start)
            name = plugin_text(dist.name, "console", 80)
            print(f"leakbed: warning: plugin distribution {name!r} ships {what}, which Python runs at every "
                  "start, outside any sandbox (see leakbed plugins)", file=out)


def render(found: list[Installed]) -> str:
    """The text ``leakbed plugins`` prints: each distribution, its entry points, and what of it to know about; every
    plugin-supplied string bounded and escaped."""
    if not found:
        return "no plugin distributions installed (leakbed's own attacks and defenses aside)\n"
    lines: list[str] = []

    def shown(text: str, limit: int) -> str:
        return plugin_text(text, "console", limit)

    for d in found:
        lines.append(f"{shown(d.name, 80)} {shown(d.version, 40)}{' (editable)' if d.editable else ''}")
        for group, label in GROUPS.items():
            eps = [f"{shown(n, 60)} = {shown(v, 120)}" for g, n, v in d.entry_points if g == group]
            lines.append(f"  {label}: {', '.join(eps) if eps else 'none'}")
        flags = [
            *(f"runs at every start, outside any sandbox: {shown(p, 160)}" for p in d.runs_at_start),
            *(f"ships {shown(p, 160)} (adds to sys.path: {', '.join(shown(x, 160) for x in d.pth_paths) or 'nothing'})"
              for p in d.pth if p not in d.pth_code),
            *(f"link, left out of its staged copy: {shown(p, 160)}" for p in d.links),
            *(f"outside the environment: {shown(p, 160)}" for p in d.outside),
            *(f"cannot be staged: {shown(p, 200)}" for p in d.problems),
        ]  # fmt: skip
        lines += [f"  ! {f}" for f in flags] or ["  no .pth file, no link, every file in the environment"]
    return "\n".join(lines) + "\n"
