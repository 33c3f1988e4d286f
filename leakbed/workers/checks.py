"""The attacks' own checks before a run starts, run in sandboxes (``workers.inside.check``): what their declaration
cannot say (a params model's validators and constraints beyond leakbed's params language, an attack's ``check``
hook against the data and the training).

A check sees only what it needs: the attacks' params tables, and one prior's knowledge at a time. Trusted code
writes, for each prior, that prior's knowledge and the run's facts as JSON into a fresh folder of its own and runs
one sandboxed call per prior (without a store or a network), each mounting only its folder, read-only; where no
attack has a check hook, one call sees no prior at all. Each reply is hostile data: read bounded, each attack's
normalised params checked again against its declaration (``core.param_schema``), and they must be the same for
every prior: a check cannot carry what it saw of one prior into the parameters another prior's lanes get.
Only attacks that declare such checks (``Declaration.validates``) pay for the sandboxes. They run on this host even
when the attacks run on remote workers; where no sandbox can start here and none was refused (``unconfined``), a
third-party attack's checks are refused in one line rather than run in a plain process of the trusted side.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from leakbed.core.declaration import Declaration, ParamsError, check_params
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.plugin_text import plugin_text
from leakbed.workers.hostile import HostileData, load_json
from leakbed.workers.introspect import INSTALL
from leakbed.workers.one_shot import NoAnswer, call_inside
from leakbed.workers.sandbox import Limits, available
from leakbed.workers.staging import BUILTIN

DEADLINE = 300.0  # [s]
MAX_REPLY = 2 << 20  # bytes of one call's reply: normalised tables (each at most core.param_schema.MAX_BYTES) and lines


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
    unconfined: str = "",
) -> dict[str, dict[str, Any]]:
    """``tables`` with each attack that declares checks of its own normalised by its model; ParamsError (one line)
    for the first attack they refuse (in the suite's order, then the priors'), or whose normalised params differ
    between priors. ``unconfined``: why no sandbox can start here, where the run did not ask for none: a third-party
    attack's checks are then refused, never run in a plain process."""
    names = [n for n in tables if declarations[n].validates]
    if not names:
        return tables
    if limits is None and unconfined:
        third = [n for n in names if declarations[n].distribution not in ("", BUILTIN)]
        if third:
            raise ParamsError(f"attack {third[0]!r} has checks of its own from the third-party distribution "
                              f"{plugin_text(declarations[third[0]].distribution, 'console', 100)} and no sandbox can "
                              f"start here for them ({unconfined}): {INSTALL}")  # fmt: skip
    request = {n: tables[n] for n in names}
    hooked = any(declarations[n].check_hook for n in names)
    calls: list[str | None] = list(priors) if hooked and priors else [None]  # None: no prior's data at all
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = {rule: pool.submit(_one_call, request, rule, priors.get(rule) if rule else None, limits) for rule in calls}
        replies = {rule: future.result() for rule, future in futures.items()}
    out = dict(tables)
    for name in names:
        seen: dict[str | None, dict[str, Any]] = {}
        for rule, doc in replies.items():
            if name in doc["errors"]:
                raise ParamsError(plugin_text(str(doc["errors"][name]), "json", 400))
            normalised = doc["params"].get(name)
            if not isinstance(normalised, dict):
                raise ParamsError(f"attack.params.{name}: its own check returned no parameters")
            seen[rule] = check_params(declarations[name], normalised, f"attack.params.{name}")
        out[name] = _same(name, seen)
    return out


def _same(name: str, seen: dict[str | None, dict[str, Any]]) -> dict[str, Any]:
    """The one table every prior's check returned; ParamsError naming the first key where two priors' differ."""
    (first, table), *others = seen.items()
    for rule, other in others:
        if _canonical(other) != _canonical(table):
            keys = sorted(set(table) | set(other))
            key = next(k for k in keys if _canonical(table.get(k)) != _canonical(other.get(k)))
            raise ParamsError(
                f"attack.params.{name}.{key}: its own check returned a different value for prior {rule!r} than for "
                f"prior {first!r}; a check's parameters may not depend on the prior"
            )
    return table


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=False)


def _one_call(
    request: dict[str, dict[str, Any]], rule: str | None, prior: tuple[AttackerKnowledge, RunFacts] | None, limits: Limits | None
) -> dict:
    """One sandboxed call over ``request`` with one prior's knowledge and facts (or none): its checked reply."""
    folder = Path(tempfile.mkdtemp(prefix="leakbed-check-"))
    try:
        inputs = folder / "in"
        inputs.mkdir(mode=0o755)
        if prior is not None:
            knowledge, facts = prior
            knowledge.save(inputs / "prior")
            (inputs / "prior" / "setting.json").write_text(json.dumps(asdict(facts)), encoding="utf-8")
        (inputs / "request.json").write_text(json.dumps({"attacks": request, "prior": rule}), encoding="utf-8")
        for path in [inputs, *inputs.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        return _reply(_run(inputs, limits))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
        why = plugin_text(str(doc.get("error", "")) if isinstance(doc, dict) else "", "json", 300)
        raise ParamsError(f"the attacks' own checks failed: {why}")
    if not isinstance(doc.get("params"), dict) or not isinstance(doc.get("errors"), dict):
        raise ParamsError("the attacks' own checks returned nothing usable")
    return doc
