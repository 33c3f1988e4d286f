"""``leakbed plugins``: the plugin distributions installed in this environment, and what of them runs outside any
sandbox (``workers.inventory``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated, Any

from leakbed.commands.options import flag
from leakbed.core.plugin_text import plugin_text

Json = Annotated[bool, flag("--json", "one JSON document instead of the text [flag]")]


def plugins(as_json: Json = False) -> int:
    """List each installed plugin distribution (attack and defense entry points), its version, whether it is an
    editable install, and flag what runs outside any sandbox at import (``.pth`` files that run code, a
    ``sitecustomize`` a ``.pth`` brings in), links among its files, and its files outside the environment. Reads
    installed metadata only: no plugin code is imported."""
    from leakbed.workers.inventory import installed, render

    found = installed()
    if as_json:
        print(json.dumps(_shown([{**asdict(d), "runs_at_start": list(d.runs_at_start)} for d in found]), indent=2))
    else:
        print(render(found), end="")
    return 0


def _shown(value: Any) -> Any:
    """Every text of an installed distribution (its names, entry points, paths: a plugin's choice) through the
    boundary for JSON: one bounded printable line each."""
    if isinstance(value, str):
        return plugin_text(value, "json", 1000)
    if isinstance(value, list | tuple):
        return [_shown(v) for v in value]
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    return value
