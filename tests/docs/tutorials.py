"""Run a tutorial's commands as a reader would: every fenced block that a ``<!-- run -->`` comment
precedes, in order, in one working folder where ``.venv``, ``examples`` and ``scripts`` are the
repository's (built-in configs are named, not read from the checkout). ``<!-- small: ARGS -->`` appends ARGS to
every ``leakbed run``/``sweep``/``deploy-local`` line, so the tutorial's own commands run at a small scale. A test
may also ``replace`` literal text in the blocks (ports and folders of its own where the page names the usual ones)
and add to their environment."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO

BLOCK = re.compile(r"<!-- run -->\s*\n```(?P<lang>\w+)[^\n]*\n(?P<code>.*?)\n```", re.S)
SMALL = re.compile(r"<!-- small: (?P<args>.*?) -->")
SCALED = re.compile(r"^(?P<cmd>\S*leakbed (?:run|sweep|deploy-local)\b.*?)(?P<cont>\\?)$")
LINKED = (".venv", "examples", "scripts")
# The example plugin is installed once per machine by the ``example_plugin`` fixture (under its lock: a second
# install would uninstall it under the feet of tests running beside); the tutorial's install line checks it is there.
INSTALLED = {".venv/bin/pip install examples/leakbed-example-plugin": ".venv/bin/pip show -q leakbed-example-plugin"}


@dataclass(frozen=True)
class Step:
    lang: str
    code: str


def steps(page: Path) -> tuple[list[Step], str]:
    """The runnable blocks of a tutorial and its small-scale arguments."""
    text = page.read_text(encoding="utf-8")
    small = SMALL.search(text)
    return [Step(m["lang"], m["code"]) for m in BLOCK.finditer(text)], small["args"] if small else ""


def scaled(code: str, small: str) -> str:
    """``code`` with ``small`` appended to each leakbed run/sweep/deploy-local command (after its last line)."""
    if not small:
        return code
    out, pending = [], False
    for line in code.splitlines():
        starts = bool(SCALED.match(line.strip()))
        pending = pending or starts
        if pending and not line.rstrip().endswith("\\"):
            line = f"{line} {small}"
            pending = False
        out.append(line)
    return "\n".join(out)


def workdir(tmp: Path) -> Path:
    for name in LINKED:
        (tmp / name).symlink_to(REPO / name)
    return tmp


def run(
    page: Path,
    tmp: Path,
    timeout: float = 900,
    replace: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    after: Callable[[int], None] | None = None,
) -> list[str]:
    """Run every step of ``page`` in ``tmp``; the outputs, or an AssertionError naming the failing block.
    ``replace`` maps text of the page to what runs instead (in order, each one required to occur somewhere on
    the page, so a test cannot go on substituting what the page no longer says); ``after(i)`` runs after block
    ``i`` (from 1), for checks that must come before a later block (one that stops what they look at)."""
    found, small = steps(page)
    assert found, f"{page.name} has no <!-- run --> block"
    swaps = {**INSTALLED, **(replace or {})}
    missing = [old for old in replace or {} if not any(old in step.code for step in found)]
    assert not missing, f"{page.name} no longer says {missing}"
    here = workdir(tmp)
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "PYTHONPATH": str(REPO), **(env or {})}
    outputs = []
    for i, step in enumerate(found, 1):
        code = scaled(step.code, small)
        for old, new in swaps.items():
            code = code.replace(old, new)
        argv = ["bash", "-euo", "pipefail", "-c", code] if step.lang == "bash" else [sys.executable, "-c", code]
        done = subprocess.run(
            argv, cwd=here, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"{page.name} block {i} failed ({done.returncode}):\n{code}\n{done.stdout[-6000:]}"
        (tmp / f"block-{i}.out").write_text(done.stdout)  # kept for a failure's diagnosis
        outputs.append(done.stdout)
        if after is not None:
            after(i)
    return outputs
