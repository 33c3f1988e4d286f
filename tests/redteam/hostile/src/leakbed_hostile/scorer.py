"""The scorer of ``hostile-scorer`` (``Scoring(kind="plugin", truth=("user_id",))``), run where leakbed runs a plugin's
scorer: it scores the ranking on the one field it declared, then tries for more. It reads truth fields it did not
declare, reads everything it was handed, walks the file system for the truth and the update-id key, writes a marker
wherever it can (where a later attack could read it), patches what it finds of the referee and of leakbed's scoring
in its process, and returns what it found beside oversized, badly named and deeply nested values."""

from __future__ import annotations

import importlib
import json
import os
import sys

import numpy as np

from leakbed.plugin import ScoreContext
from leakbed_hostile.common import hunt, leave_marks

UNDECLARED = ("round", "label-share", "property", "records", "node", "partition_id", "update_id")


def _patch() -> list[str]:
    done = []
    for name in ("leakbed.referee.scorers", "leakbed.referee.kinds", "leakbed.referee.truth", "leakbed.referee.seal",
                 "leakbed.workers.scoring", "leakbed.core.reid_metrics"):
        try:
            mod = sys.modules.get(name) or importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not reachable from here
            continue
        for attr in ("score_one", "score_plugin", "_clean", "reid_metrics", "load"):
            if hasattr(mod, attr):
                setattr(mod, attr, lambda *a, **k: {"ap": 1.0, "top1": 1.0})
                done.append(f"{name}.{attr}")
    return done


def score(ctx: ScoreContext) -> dict:
    ids = np.asarray(ctx.given, dtype=str)
    out = ctx.outputs
    owners = ctx.truth.truth_for(ids)
    row = {str(i): k for k, i in enumerate(out["ids"])}
    classes = np.asarray(out["classes"], dtype=str)
    named = [classes[int(np.argmax(out["scores"][row[i]]))] if i in row else "" for i in ids]
    top1 = float(np.mean([n == o for n, o in zip(named, owners, strict=True)])) if len(ids) else 0.0
    read = {}
    for field in UNDECLARED:
        try:
            read[field] = ctx.truth.field_for(ids, field)[:3]
        except (KeyError, AttributeError, TypeError):
            continue
    handed: dict = {}
    inputs = "/leakbed/inputs"
    try:
        handed["files"] = sorted(os.listdir(inputs))
        with open(os.path.join(inputs, "request.json"), encoding="utf-8") as f:
            request = json.load(f)
        handed["request_keys"] = sorted(request)
        handed["truth_fields"] = sorted(request.get("truth", {}))
    except OSError as err:
        handed["error"] = str(err)
    found = hunt(budget=6.0)
    marks = leave_marks("hostile-scorer")
    patched = _patch()
    return {
        "top1": top1,
        "fields_seen": ",".join(sorted(ctx.truth.fields)),
        "undeclared_fields_read": len(read),
        "handed_truth_fields": ",".join(handed.get("truth_fields", [])),
        "handed_files": ",".join(handed.get("files", [])),
        "truth_files": len(found["files"]),
        "owners_found": len(found["owners"]),
        "marks_written": marks["written"],
        "patched": patched,
        "uid": os.getuid(),
        "pid": os.getpid(),
        "long_text": "A" * 200_000,
        "bad key!": 1.0,
        "__class__": "x",
        "nested": {"a": {"b": {"c": {"d": {"e": {"f": 1.0}}}}}},
        "not_finite": float("inf"),
        "notes": [f"\x1b[2J\n{'leakbed'}: hostile-scorer says every attack scored at chance"],
    }
