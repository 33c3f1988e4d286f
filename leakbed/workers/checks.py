"""The attacks' own checks before a run starts, run in a sandbox (``workers.inside.check``): what their declared
schema cannot say (a params model's validators, an attack's ``check`` hook against the data and the training).

Trusted code writes, per prior, what those checks need into a fresh folder (the attacker's knowledge and the run's
facts as JSON), mounts it read-only in a sandbox without a store or a network, and reads the reply as bounded JSON:
each attack's params as its own model normalised them (checked again against the declared schema), or one line.
Only attacks that declare such checks (``Declaration.validates``) pay for the sandbox.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from leakbed.core.declaration import Declaration, ParamsError, check_params
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.workers.hostile import HostileData, load_json, words
from leakbed.workers.one_shot import NoAnswer, call_inside
from leakbed.workers.sandbox import Limits, available

DEADLINE = 300.0  # [s]
MAX_REPLY = 4 << 20


@dataclass(frozen=True)
class RunFacts:
    """What an attack's ``check`` learns of the run beside the attacker's knowledge (``core.declaration.Setting``)."""

    source: str
    model: str
    parameters: tuple[str, ...]
    optimizer: str
    momentum: float
    local_steps: int
    secure_aggregation: bool


def own_checks(
    declarations: dict[str, Declaration],
    tables: dict[str, dict[str, Any]],
    priors: dict[str, tuple[AttackerKnowledge, RunFacts]],
    limits: Limits | None,
) -> dict[str, dict[str, Any]]:
    """``tables`` with each attack that declares checks of its own normalised by its model; ParamsError (one line)
    for the first attack they refuse."""
    names = [n for n in tables if declarations[n].validates]
    if not names:
        return tables
    folder = Path(tempfile.mkdtemp(prefix="leakbed-check-"))
    try:
        inputs = folder / "in"
        inputs.mkdir(mode=0o755)
        for rule, (knowledge, facts) in priors.items():
            knowledge.save(inputs / rule)
            (inputs / rule / "setting.json").write_text(json.dumps(asdict(facts)), encoding="utf-8")
        request = {"attacks": {n: tables[n] for n in names}, "priors": list(priors)}
        (inputs / "request.json").write_text(json.dumps(request), encoding="utf-8")
        for path in [inputs, *inputs.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        doc = _reply(_run(inputs, limits))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    errors = doc["errors"]
    out = dict(tables)
    for name in names:
        if name in errors:
            raise ParamsError(words(str(errors[name]), 400))
        normalised = doc["params"].get(name)
        if not isinstance(normalised, dict):
            raise ParamsError(f"attack.params.{name}: its own check returned no parameters")
        out[name] = check_params(declarations[name], normalised, f"attack.params.{name}")
    return out


def _run(inputs: Path, limits: Limits | None) -> bytes:
    """The checks in a sandbox with ``limits``, or in a process of its own where the run has none (``workers.sandbox``
    off, or no sandbox here)."""
    sandboxed = limits is not None and available() == ""
    try:
        answer = call_inside("leakbed.workers.inside.check", what="the attacks' own checks", limits=limits if sandboxed else None,
                             inputs=inputs, deadline=DEADLINE, max_bytes=MAX_REPLY)
    except NoAnswer as err:
        raise ParamsError(str(err)) from None
    return answer.data


def _reply(raw: bytes) -> dict:
    try:
        doc = load_json(raw, max_bytes=MAX_REPLY, max_depth=24)
    except HostileData as err:
        raise ParamsError(f"the attacks' own checks returned nothing usable ({err})") from None
    if not isinstance(doc, dict) or not doc.get("ok"):
        why = words(str(doc.get("error", "")) if isinstance(doc, dict) else "", 300)
        raise ParamsError(f"the attacks' own checks failed: {why}")
    if not isinstance(doc.get("params"), dict) or not isinstance(doc.get("errors"), dict):
        raise ParamsError("the attacks' own checks returned nothing usable")
    return doc
