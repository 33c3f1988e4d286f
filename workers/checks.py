"""The attacks' own checks before a run starts, run in a sandbox (``workers.inside.check``): what their declared
schema cannot say (a params model's validators, an attack's ``check`` hook against the data and the training).

Trusted code writes, per prior, what those checks need into a fresh folder (the attacker's knowledge and the run's
facts as JSON), mounts it read-only in a sandbox without a store or a network, and reads the reply as bounded JSON:
each attack's params as its own model normalised them (checked again against the declared schema), or one line.
Only attacks that declare such checks (``Declaration.validates``) pay for the sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from core.declaration import Declaration, ParamsError, check_params
from core.knowledge import AttackerKnowledge
from workers.hostile import HostileData, load_json, words
from workers.sandbox import INSIDE, Limits, Mount, Sandbox, available, end

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
    r, w = os.pipe()
    io = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    inside = INSIDE / "inputs"
    box = Sandbox(limits or Limits(), [Mount(inputs, inside)], output=False)
    command = [sys.executable, "-m", "workers.inside.check", "--out", str(w)]
    try:
        if limits is not None and available() == "":
            proc = box.popen([*command, "--inputs", str(inside)], pass_fds=(w,), **io)
        else:  # the run has no sandbox (workers.sandbox off, or none here): a process of its own, never this one
            proc = subprocess.Popen([*command, "--inputs", str(inputs)], pass_fds=(w,), env=box.env(plain=True),  # type: ignore[call-overload]
                                    close_fds=True, start_new_session=True, **io)
    finally:
        os.close(w)
    chunks, size, until = [], 0, time.monotonic() + DEADLINE
    try:
        import select

        poller = select.poll()
        poller.register(r, select.POLLIN | select.POLLHUP)
        while True:
            remaining = until - time.monotonic()
            if remaining <= 0:
                raise ParamsError(f"the attacks' own checks did not finish within {DEADLINE:.0f} s")
            if not poller.poll(int(min(remaining, 1.0) * 1000)):
                continue
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_REPLY:
                raise ParamsError("the attacks' own checks wrote more than their reply may hold")
            chunks.append(chunk)
    except ParamsError:  # past its deadline or over its bound: ended now, not after the grace below
        end(proc)
        raise
    finally:
        os.close(r)
        try:
            proc.wait(timeout=10)  # it closed its pipe: it is exiting
        except subprocess.TimeoutExpired:
            end(proc)
    return b"".join(chunks)


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
