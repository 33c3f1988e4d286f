"""The one boundary for plugin numbers: every number a sandbox hands back is parsed here, with its type and range.

A sandbox's numbers are hostile like its texts: a reply header's ``seconds`` may be a 400-digit integer (``float``
of it raises, in whichever thread reads it), negative, or longer than the task ran; a declared budget may be longer
than the run allows; a plugin scorer's AP may be 7, ``inf`` or missing; the outputs another attack builds on may
have the wrong shape or hold NaN. Each is checked here, once, before trusted code uses it, and a number that fails
refuses what holds it in one line (``HostileData``): that task, that score or that hand-over fails, nothing else.

- ``reply_header``: a lane's reply header (``ok``, ``seconds`` within what the task took, ``pid``, ``error``);
- ``task_deadline``: an attack's own budget, capped by the run's task deadline;
- ``scorer_result``: a plugin scorer's result: metrics in their ranges, texts bounded, exports named and counted;
- ``upstream_outputs``: the outputs an attack builds on, checked as the ranking they must be before any lane
  reads them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from leakbed.core.declaration import FIELD
from leakbed.core.plugin_text import plugin_text, quoted_name
from leakbed.workers.hostile import ArraySpec, HostileData, load_json, load_npz

__all__ = ["RANKING", "number", "reply_header", "scorer_result", "task_deadline", "upstream_outputs"]

MAX_INT = 1 << 53  # every integer a float holds exactly: what JSON, Prometheus and the report can all show
MAX_PID = 1 << 22  # Linux's pid_max ceiling
CLOCK_SLACK = 1.0  # [s] a lane's own clock against trusted code's, measured around the same exchange
HEADER_KEYS = frozenset({"ok", "seconds", "pid", "error"})
# a plugin scorer's result
MAX_METRICS = 256  # numbers at its top level
MAX_NESTED = 1000  # keys or items of one nested dict or list
MAX_DEPTH = 4
MAX_NOTES = 16
MAX_TABLES = 8
MAX_TABLE_ROWS = 500
MAX_TABLE_COLUMNS = 32
MAX_EXPORTS = 16
NOTE_CHARS = 300
CELL_CHARS = 120
SHARES = ("ap", "chance_ap", "top1", "top5", "auc", "accuracy", "chance", "coverage", "count_accuracy", "precision",
          "recall", "f1")  # fmt: skip
COUNTS = ("n_updates", "updates", "n_users", "users", "rows_missing", "rounds", "samples", "images", "n_classes")
_KEY = re.compile(FIELD)
# what an attack of the closed-world family hands the attacks that build on it (referee.schemas.RANKING: the same)
RANKING = {
    "ids": ArraySpec("U", ("n",)),
    "rounds": ArraySpec("iu", ("n",), optional=True),
    "classes": ArraySpec("U", ("k",)),
    "scores": ArraySpec("f", ("n", "k")),
}


def number(value: Any, what: str, *, lo: float = -math.inf, hi: float = math.inf, integer: bool = False) -> float | int:
    """``value`` as a number in ``[lo, hi]`` (an integer where ``integer``); HostileData naming ``what`` otherwise.

    Booleans are not numbers; integers beyond 2**53 and non-finite floats are refused before any conversion (a huge
    integer cannot become a float, and NaN compares as nothing)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise HostileData(f"{what} is {type(value).__name__}, not a number")
    if isinstance(value, int):
        if abs(value) > MAX_INT:
            raise HostileData(f"{what} is an integer of {value.bit_length()} bits, more than 2**53")
    elif not math.isfinite(value):
        raise HostileData(f"{what} is {value}, not a finite number")
    if integer and not float(value).is_integer():
        raise HostileData(f"{what} is {value}, not a whole number")
    if not lo <= value <= hi:
        raise HostileData(f"{what} is {value}, outside [{lo:g}, {hi:g}]")
    return int(value) if integer else value


# --- frames -------------------------------------------------------------------------------------------------------


def reply_header(raw: bytes | Mapping[str, Any], *, elapsed: float) -> dict[str, Any]:
    """A lane's reply header, checked: ``{"ok": bool, "seconds": float, "error": str}`` (and ``pid`` when it sent
    one). ``seconds`` is what the lane says its task took: at least 0, at most ``elapsed`` (what trusted code measured
    around the exchange) plus a second of clock slack. Any other key, type or value refuses it (HostileData)."""
    doc = load_json(raw, max_bytes=len(raw) + 1, max_depth=2, max_items=16) if isinstance(raw, bytes) else raw
    if not isinstance(doc, Mapping) or not isinstance(doc.get("ok"), bool):
        raise HostileData("a reply header without 'ok'")
    stray = sorted(set(doc) - HEADER_KEYS)
    if stray:
        raise HostileData(f"a reply header with key {quoted_name(stray[0], 40)}")
    seconds = number(doc.get("seconds", 0.0), "its seconds", lo=0.0, hi=max(0.0, elapsed) + CLOCK_SLACK)
    out: dict[str, Any] = {"ok": doc["ok"], "seconds": float(seconds)}
    if "pid" in doc:
        out["pid"] = number(doc["pid"], "its pid", lo=1, hi=MAX_PID, integer=True)
    if not doc["ok"]:
        error = doc.get("error", "")
        if not isinstance(error, str):
            raise HostileData(f"a failed reply whose error is {type(error).__name__}, not text")
        out["error"] = error
    return out


def task_deadline(budget: Any, cap: float) -> float:
    """An attack's own budget [s] (a params value it declared), never more than ``cap`` (the run's
    ``workers.task_deadline``): a budget that is not a positive finite number is the cap."""
    try:
        value = number(budget, "its budget", lo=0.0)
    except HostileData:
        return cap
    return float(min(value, cap)) if value > 0 else cap


# --- a plugin scorer's result -------------------------------------------------------------------------------------


def _metric(key: str, value: Any, where: str) -> float | int | bool | None:
    if value is None or isinstance(value, bool):
        return value
    what = f"{where}{key}"
    if key in SHARES:
        return number(value, what, lo=0.0, hi=1.0)
    if key in COUNTS:
        return number(value, what, lo=0, hi=MAX_INT, integer=True)
    if key == "x_chance":
        return number(value, what, lo=0.0, hi=1e9)
    return number(value, what)


def _nested(value: Any, depth: int) -> Any:
    """Numbers (checked), booleans, short texts (cleaned) and their nesting, for per-round and per-group views; other
    values and badly named keys dropped."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        try:
            return number(value, "a nested value")
        except HostileData:
            return None
    if isinstance(value, str):
        return plugin_text(value, "json", NOTE_CHARS)
    if depth >= MAX_DEPTH:
        return None
    if isinstance(value, list):
        return [_nested(v, depth + 1) for v in value[:MAX_NESTED]]
    if isinstance(value, dict):
        items = list(value.items())[:MAX_NESTED]
        return {k: _nested(v, depth + 1) for k, v in items if isinstance(k, str) and _KEY.fullmatch(k)}
    return None


def _tables(value: Any) -> dict[str, dict[str, list]]:
    """``{title: {"header": [...], "rows": [[...]]}}``: titles and cells as bounded text, at most so many."""
    if not isinstance(value, dict):
        return {}
    out: dict[str, dict[str, list]] = {}
    for title, table in list(value.items())[:MAX_TABLES]:
        if not isinstance(table, dict) or not isinstance(table.get("header"), list) or not isinstance(table.get("rows"), list):
            continue
        header = [plugin_text(h, "json", CELL_CHARS) for h in table["header"][:MAX_TABLE_COLUMNS]]
        rows = [[plugin_text(c, "json", CELL_CHARS) for c in row[:MAX_TABLE_COLUMNS]]
                for row in table["rows"][:MAX_TABLE_ROWS] if isinstance(row, list)]  # fmt: skip
        out[plugin_text(title, "json", CELL_CHARS)] = {"header": header, "rows": rows}
    return out


def _exports(value: Any) -> dict[str, dict[str, float | int]]:
    """A plugin's further rows for the dashboards: ``{name: {metric: number}}``, names as bounded text (telemetry puts
    them under the plugin's own name), at most ``MAX_EXPORTS``, each metric checked."""
    if not isinstance(value, dict):
        return {}
    if len(value) > MAX_EXPORTS:
        raise HostileData(f"{len(value)} exports, more than the {MAX_EXPORTS} allowed")
    out: dict[str, dict[str, float | int]] = {}
    for name, metrics in value.items():
        shown = plugin_text(name, "json", 64)
        if not isinstance(metrics, dict) or not shown:
            continue
        out[shown] = {k: _metric(k, v, f"export {shown!r} ") for k, v in list(metrics.items())[:MAX_METRICS]
                      if isinstance(k, str) and _KEY.fullmatch(k) and isinstance(v, int | float) and not isinstance(v, bool)}
    return out


def scorer_result(doc: Any) -> dict[str, Any]:
    """A plugin scorer's result, checked: its metrics at the top level (each in its range: shares in [0, 1], counts
    whole and not negative, every number finite and within 2**53), ``notes`` and ``tables`` as bounded text, its
    ``exports``, and nested per-round or per-group views; keys it may not set (``scored_by``, ``scorer_failed``,
    ``figures``: a scoring sandbox writes no file) dropped. HostileData (one line) when a number is out of range."""
    if not isinstance(doc, dict):
        raise HostileData(f"the result is {type(doc).__name__}, not a dict")
    out: dict[str, Any] = {}
    scalars = 0
    for key, value in doc.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key) or key in ("scored_by", "scorer_failed", "figures"):
            continue
        if key == "notes":
            items = value if isinstance(value, list) else [value]
            out["notes"] = [plugin_text(n, "json", NOTE_CHARS) for n in items[:MAX_NOTES]]
        elif key == "tables":
            out["tables"] = _tables(value)
        elif key == "exports":
            out["exports"] = _exports(value)
        elif isinstance(value, dict | list):
            out[key] = _nested(value, 1)
        elif isinstance(value, str):
            out[key] = plugin_text(value, "json", NOTE_CHARS)
        else:
            scalars += 1
            if scalars > MAX_METRICS:
                raise HostileData(f"more than {MAX_METRICS} metrics")
            out[key] = _metric(key, value, "")
    return out


# --- outputs another attack builds on -------------------------------------------------------------------------------


def upstream_outputs(data: bytes, *, max_bytes: int, ranking: bool) -> dict[str, np.ndarray]:
    """Outputs handed to an attack that builds on them, checked as hostile data: bounded, no objects, every float
    finite, and for a closed-world attacker (``ranking``) the ranking ``RANKING`` names (ids and rounds of ``n``
    updates, ``k`` classes, an ``n × k`` float score per update and class, each class named once)."""
    arrays = load_npz(data, max_bytes=max_bytes, schema=RANKING if ranking else None)
    for key, arr in arrays.items():
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            raise HostileData(f"array {quoted_name(key)} holds {int((~np.isfinite(arr)).sum())} values that are not finite")
    if ranking and len(np.unique(arrays["classes"])) != len(arrays["classes"]):
        raise HostileData("array 'classes' names a class twice")
    return arrays
