"""Red team: an adversarial attack that tries every path we know to an update's owner, except the
weights themselves, and reports what it found (suite name ``redteam``).

Threat model: an attack module written to cheat, run by a real attack worker during a real run. It
receives what every attack receives (its store, its knowledge) and then reaches further: the
file system from its store root, working directory and all their parents; its environment and
every command line and environment it can read under ``/proc``; the knowledge file; seeds it
holds or finds, from which it regenerates the shuffler's update ids of the old derivation
(``default_rng([seed, 0x5A])``, hence each update's round); the names, sizes and modification times
of the store's files; and the order in which updates were filed. Each probe guesses an owner (or
a round) per anonymous update; the referee scores the guesses against the truth
(``leakbed/referee/score_redteam.py``). The boundary holds when every probe is at chance.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

import numpy as np

from leakbed.attacks import breakout
from leakbed.attacks.contract import Attack, AttackContext, Outputs
from leakbed.core.inputs import InputsView
from leakbed.core.knowledge import KNOWLEDGE_JSON, AttackerKnowledge
from leakbed.core.store import UpdateStore

NAME = "redteam"
MAX_FILES = 20_000  # per walk: bounded, it must finish inside a run
MAX_DEPTH = 6
_SEED = re.compile(r"(?:^|[\s\"'{,])seed\s*[=:]\s*(-?\d+)")
_PATHISH = re.compile(r"(/[^\s\"'=:;,]+)")


# public software, not run data: the OS, the Python install, the venv (walking them only costs time)
RUNTIME = {Path(p) for p in ("/proc", "/sys", "/dev", "/usr", "/lib", "/lib64", "/bin", "/sbin", sys.prefix, sys.base_prefix)}


def _walk(start: Path, seen: set[Path]) -> Iterable[Path]:
    """Files under ``start``, bounded in count and depth, outside the runtime directories."""
    count = 0
    base = len(start.parts)
    for folder, dirs, files in os.walk(start, onerror=lambda _: None):
        here = Path(folder)
        if here in seen or here in RUNTIME or len(here.parts) - base >= MAX_DEPTH:
            dirs[:] = []
            continue
        seen.add(here)
        for name in files:
            count += 1
            if count > MAX_FILES:
                return
            yield here / name


def _read(path: Path, limit: int = 5_000_000) -> str:
    try:
        if not path.is_file() or path.stat().st_size > limit:
            return ""
        return path.read_text(encoding="utf-8", errors="ignore")
    except OSError:
        return ""


RECIPE = {"data", "synthetic", "split", "path", "seed", "shuffler", "fl"}  # what would regenerate data or sampling


def _keys(doc: object) -> set[str]:
    if isinstance(doc, dict):
        return set(doc) | {k for v in doc.values() for k in _keys(v)}
    if isinstance(doc, list):
        return {k for v in doc for k in _keys(v)}
    return set()


def owners_in(text: str) -> dict[str, str]:
    """update id -> user id from any JSON lines that pair them (a truth file, wherever it lies)."""
    found = {}
    for line in text.splitlines():
        if '"update_id"' in line and '"user_id"' in line:
            try:
                rec = json.loads(line)
                found[str(rec["update_id"])] = str(rec["user_id"])
            except (ValueError, KeyError, TypeError):
                continue
    return found


def seeds_in(text: str) -> set[int]:
    return {int(m) for m in _SEED.findall(text)}


def scan(starts: Iterable[Path]) -> tuple[dict[str, str], set[int], list[str]]:
    """Walk from each start: owners from truth-like files, seeds from configs, and what was read."""
    owners: dict[str, str] = {}
    seeds: set[int] = set()
    evidence: list[str] = []
    seen: set[Path] = set()
    for start in starts:
        for f in _walk(start, seen):
            if f.suffix not in (".jsonl", ".json", ".toml", ".txt", ".log", ".yml", ".yaml", ".cfg", ".env", ".key", ""):
                continue
            text = _read(f)
            got, s = owners_in(text), seeds_in(text) if f.suffix in (".toml", ".json", ".env", ".yml", ".yaml", "") else set()
            if got:
                owners |= got
                evidence.append(f"owners in {f}")
            if s and f.name != KNOWLEDGE_JSON:
                seeds |= s
                evidence.append(f"seed {sorted(s)[:3]} in {f}")
    return owners, seeds, evidence


def parents(path: Path) -> list[Path]:
    path = path.resolve()
    return [path, *path.parents]


def process_texts(proc: Path = Path("/proc")) -> list[str]:
    """Every command line and environment this process can read: its own and any other's."""
    texts = [" ".join(f"{k}={v}" for k, v in os.environ.items())]
    for entry in proc.glob("[0-9]*"):
        for name in ("cmdline", "environ"):
            try:
                texts.append((entry / name).read_bytes().replace(b"\0", b" ").decode(errors="ignore"))
            except OSError:
                continue
    return texts


def regenerated_rounds(ids: list[str], seeds: set[int], rounds: int) -> tuple[dict[str, int], list[str]]:
    """A shuffler that draws ids in sequence from ``default_rng([seed, 0x5A])`` (as ours once did)
    gives each id away: with K devices a round, the k-th id drawn belongs to round k // K + 1."""
    if not ids or rounds < 1:
        return {}, []
    per_round = max(1, len(ids) // rounds)
    want = set(ids)
    for seed in sorted(seeds)[:64]:
        rng = np.random.default_rng([seed, 0x5A])
        stream = [rng.bytes(8).hex() for _ in range(2 * len(ids))]
        found = {i: k // per_round + 1 for k, i in enumerate(stream) if i in want}
        if found:
            return found, [f"ids regenerated from seed {seed}: {len(found)} of {len(ids)}"]
    return {}, []


def probe(store: UpdateStore | InputsView, knowledge: AttackerKnowledge, *, cwd: Path | None = None,
          texts: list[str] | None = None) -> dict:
    """Run every probe from inside a worker (``cwd``/``texts`` may be given by a test's fixture)."""
    anon = store.read_anon()
    ids = [str(i) for i in anon["ids"]]
    users = sorted(knowledge.prior)
    out: dict[str, dict] = {}

    def record(name: str, owners: dict[str, str], evidence: list[str], rounds: dict[str, int] | None = None) -> None:
        out[name] = {
            "owner": [owners.get(i, "") for i in ids],
            "round": [int((rounds or {}).get(i, -1)) for i in ids],
            "evidence": evidence[:20],
        }

    here = Path(cwd or os.getcwd())
    owners, fs_seeds, ev = scan([*parents(store.root), *parents(here)])
    record("filesystem", owners, ev)

    texts = process_texts() if texts is None else texts
    paths = {Path(p) for t in texts for p in _PATHISH.findall(t)}
    env_seeds = {s for t in texts for s in seeds_in(t)}
    owners, more_seeds, ev = scan(sorted(p for p in paths if p.exists() and not any(p.is_relative_to(r) for r in RUNTIME)))
    record("environment", owners, [*ev, *(f"seed {s} on a command line or in an environment" for s in sorted(env_seeds))])

    doc = json.loads((store.root / KNOWLEDGE_JSON).read_text()) if (store.root / KNOWLEDGE_JSON).exists() else {}
    k_text = json.dumps({k: v for k, v in doc.items() if k != "seed"})
    recipe = [f"knowledge holds a {k!r} section" for k in sorted(_keys({k: v for k, v in doc.items() if k != "seed"}) & RECIPE)]
    trained = len(list((store.root / "global").glob("r*.npz")))
    rounds, ev = regenerated_rounds(ids, {int(doc["seed"])} if "seed" in doc else set(), trained)
    record("knowledge", {}, [*recipe, *ev], rounds)

    rounds, ev = regenerated_rounds(ids, {*fs_seeds, *env_seeds, *more_seeds, *seeds_in(k_text)}, trained)
    record("regenerate", {}, ev, rounds)

    files = [f for f in store.root.rglob("*") if f.is_file()]
    named = {i: u for f in files for u in users if u in f.name for i in ids if i in f.name}
    record("store-files", named, [f"a user's name in the store file {f.name}" for f in files if any(u in f.name for u in users)])

    order: dict[str, str] = {}
    for rnd in np.unique(anon["round"]):
        in_round = [i for i, r in zip(ids, anon["round"], strict=True) if int(r) == rnd]
        if len(in_round) == len(users):  # everyone sampled: filing order = the devices' (partition) order
            order |= dict(zip(in_round, users, strict=True))
    record("arrival-order", order, [])
    return out


def breakout_probes(folder: Path) -> dict[str, dict]:
    """The harmless break-out probes (``attacks.breakout.HARMLESS``) from inside this lane: every TCP
    port on loopback, addresses off the machine, capabilities, devices, /proc/sys, other processes."""
    scratch = folder / "redteam-scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    args = breakout.parser().parse_args(["--all-ports", "--scratch", str(scratch)])
    return breakout.run(args, breakout.HARMLESS)


class RedTeam(Attack):
    """An attack written to cheat: every path we know to an update's owner, and harmless break-out probes."""

    name: ClassVar[str] = NAME
    source = "leakbed's red team (DESIGN.md: the boundary is physical, and tested)"
    threat = (
        "hostile attack code in a real worker during a real run: what every attack receives (its store, its "
        "knowledge), then everything it can reach from inside its worker"
    )
    scorer = "redteam"

    def predict(self, ctx: AttackContext) -> Outputs:
        found = {"probes": probe(ctx.store, ctx.knowledge), "breakout": breakout_probes(ctx.folder)}
        return {"found": np.asarray(json.dumps(found))}
