"""A plugin's own scorer, run in a scoring sandbox so that the referee's process stays plugin-free.

Trusted code writes, into a fresh folder of its own, only what that scorer may see: the attack's outputs as the pool
checked them, the ids of the anonymous updates the attack was given, its parameters, and the truth fields it
declared (``Scoring.truth``) for those updates of its own prior. The folder is mounted read-only in a sandbox with
no other path (no store, no other attack's outputs, no network; the staged code of leakbed and of the attack's own
distribution) under a uid of its own where leakbed is root, and removed afterwards, so nothing the scorer sees is
ever where an attack sandbox can read it. A plugin's scorer runs only once no lane of its prior can run: after the
pool has closed (``server.experiment``: no interim score runs a plugin's scorer). The scorer's result comes back
through a pipe as bounded JSON, checked by ``workers.numbers.scorer_result``: numbers in their ranges, texts bounded
(``core.plugin_text``), exports counted; a result that fails is that plugin's failure (``PluginScorerError``), one
line, never the run's.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from leakbed.core.declaration import Declaration
from leakbed.core.plugin_text import said
from leakbed.workers.hostile import HostileData, load_json
from leakbed.workers.numbers import scorer_result
from leakbed.workers.one_shot import NoAnswer, call_inside
from leakbed.workers.sandbox import Limits, available

MAX_RESULT = 1 << 20  # bytes of a scorer's JSON
DEADLINE = 600.0  # [s] one plugin scorer


class PluginScorerError(RuntimeError):
    """The plugin's scorer failed, timed out or returned something refused (one line)."""


def score_plugin(
    *,
    decl: Declaration,
    outputs: Path,
    truth: dict[str, list[Any]],
    params: dict[str, Any],
    given: np.ndarray,
    output: str = "",
    limits: Limits | None = None,
    deadline: float = DEADLINE,
) -> dict[str, Any]:
    """The plugin scorer's metrics for the attack's ``outputs`` (a trusted ``.npz``), ``truth`` holding each declared
    field's value per given id (in ``given`` order); ``limits`` None: a sandbox with default limits where one can
    start, else a process of its own."""
    given = np.asarray(given, dtype=str)
    stray = set(truth) - set(decl.scoring.truth)
    if stray:
        raise PluginScorerError(f"truth fields {sorted(stray)} were not declared by {decl.name!r}")
    folder = Path(tempfile.mkdtemp(prefix="leakbed-score-"))
    try:
        inputs = folder / "in"
        inputs.mkdir(mode=0o755)
        by_id = {f: {str(i): _plain(v) for i, v in zip(given, values, strict=True)} for f, values in truth.items()}
        select = f"{decl.distribution}:{decl.name}" if decl.distribution else decl.name  # the distribution that declared it
        request = {"attack": decl.name, "select": select, "output": output or decl.name, "params": params, "truth": by_id}
        (inputs / "request.json").write_text(json.dumps(request), encoding="utf-8")
        shutil.copyfile(outputs, inputs / "outputs.npz")
        with (inputs / "given.npy").open("wb") as f:
            np.save(f, given, allow_pickle=False)
        for p in inputs.iterdir():
            p.chmod(0o644)
        raw = _run(inputs, limits, deadline, [decl.distribution] if decl.distribution else None)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return _result(decl.name, raw)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


def _run(inputs: Path, limits: Limits | None, deadline: float, plugins: list[str] | None) -> bytes:
    """The scorer in its sandbox (``limits``, or the defaults; its uid its own, leakbed's and its distribution's
    staged code only), or in a process of its own where none can start."""
    sandbox = (limits or Limits()) if available() == "" else None
    try:
        answer = call_inside("leakbed.workers.inside.score", what="the plugin's scorer", limits=sandbox, inputs=inputs,
                             deadline=deadline, max_bytes=MAX_RESULT, plugins=plugins)
    except NoAnswer as err:
        raise PluginScorerError(str(err)) from None
    return answer.data


def _result(name: str, raw: bytes) -> dict[str, Any]:
    try:
        doc = load_json(raw, max_bytes=MAX_RESULT, max_depth=8, max_items=20_000)
    except HostileData as err:
        raise PluginScorerError(f"the plugin's scorer returned no result ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("ok"), bool):
        raise PluginScorerError("the plugin's scorer returned no result")
    if not doc["ok"]:
        raise PluginScorerError(said(f"the scorer of {name!r}", doc.get("error", ""), "json", 300))
    try:
        result = scorer_result(doc.get("result"))
    except HostileData as err:
        raise PluginScorerError(f"the plugin's scorer returned a result refused: {err}") from None
    return {**result, "scored_by": "plugin"}
