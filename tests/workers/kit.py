"""What the tests of ``workers/`` share: a tiny attacker's knowledge from a tiny federation, anonymous updates of
its shape, the built-in attacks' declarations (introspected in a sandbox; ``conftest.decls`` does it once per run),
a prior's store filled the way the pool fills it, and ways to kill a lane's process mid-task and see it gone."""

from __future__ import annotations

import functools
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from leakbed.core.declaration import Declaration, check_params
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.processes import alive
from leakbed.core.records import AnonymousUpdate, RoundSnapshot
from leakbed.core.store import UpdateStore

TRAIN = {"epochs": 1, "batch_size": 8, "lr": 0.1, "optimizer": "sgd", "momentum": 0.0}
# the built-in attacks these tests run: two re-identification attacks, one that builds on their family, one with
# a per-round hook and its own check, and the ones with check hooks
BUILTINS = ("knn", "mlp", "svm", "metadata", "profile", "membership", "attributes", "feature-inference")


@functools.cache
def knowledge() -> tuple[AttackerKnowledge, dict[str, np.ndarray], list[str]]:
    """The attacker's knowledge of the tiny federation (``tests.conftest.tiny_config``), its global model's arrays and
    the attack layers' keys."""
    import torch

    from leakbed.core.data import federation
    from leakbed.core.models import attack_keys, build_model
    from leakbed.core.training import state_arrays
    from tests.conftest import tiny_config

    cfg = tiny_config()
    fed = federation(cfg, "random")
    torch.manual_seed(0)
    model = build_model(cfg.model, fed.corpus)
    keys = attack_keys(model, ["final"])
    k = AttackerKnowledge(prior=fed.prior(), corpus_meta=replace(fed.corpus, users={}), model=cfg.model, keys=keys,
                          seed=0, device="cpu")
    return k, state_arrays(model), keys


def dim() -> int:
    _, arrays, keys = knowledge()
    return sum(arrays[k].size for k in keys)


def anon(rnd: int, n: int, rng: np.random.Generator, size: int | None = None) -> list[AnonymousUpdate]:
    """``n`` anonymous updates of round ``rnd``: unit vectors of the attack layers' size, opaque ids."""
    size = size or dim()
    out = []
    for i in range(n):
        v = rng.normal(size=size).astype(np.float32)
        out.append(AnonymousUpdate(f"{rnd:02d}{i:014x}", rnd, v / np.linalg.norm(v), 10))
    return out


def snapshot(rnd: int, **train: object) -> RoundSnapshot:
    _, arrays, _ = knowledge()
    return RoundSnapshot(rnd, arrays, {**TRAIN, **train})


def introspect(cache: Path) -> dict[str, Declaration]:
    """The built-in attacks' declarations, introspected in a sandbox (cached in ``cache``)."""
    from leakbed.workers.introspect import Introspector
    from leakbed.workers.sandbox import Limits

    return Introspector(Limits(), cache=cache).declarations(BUILTINS)


def params(decls: dict[str, Declaration], *names: str, **overrides: dict) -> dict[str, dict]:
    """The checked parameters of ``names`` (their declared defaults, with ``overrides`` by name, ``-`` as ``_``)."""
    return {n: check_params(decls[n], overrides.get(n.replace("-", "_")), f"attack.params.{n}") for n in names}


def fill_store(root: Path, rounds: int = 2, per_round: int = 3, seed: int = 0, shadow: bool = True) -> Path:
    """A prior's inputs as the pool writes them: the knowledge, each round's global model and config, the
    anonymous updates and (``shadow``) one random shadow update per known user and round."""
    k, arrays, _ = knowledge()
    store = UpdateStore(root)
    k.save(root)
    rng = np.random.default_rng(seed)
    users = sorted(k.prior)
    for rnd in range(1, rounds + 1):
        store.write_global(rnd, arrays)
        store.write_config(rnd, TRAIN)
        ups = anon(rnd, per_round, rng)
        store.write_anon(rnd, "b0", [u.update_id for u in ups], np.stack([u.vector for u in ups]),
                         np.full(len(ups), 10), {"norm": np.ones(len(ups)), "sparsity": np.zeros(len(ups)),
                                                 "nbytes": np.full(len(ups), 100)})
        if shadow:
            store.write_shadow(rnd, users, rng.normal(size=(len(users), dim())).astype(np.float32))
    for path in [root, *root.rglob("*")]:  # readable by the sandbox user, as the pool's umask leaves it
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kill_when_busy(pid: int, busy: float = 0.5, timeout: float = 120.0) -> None:
    """SIGKILL ``pid`` (the OOM killer's signal) once it has spent ``busy`` s of CPU from now: mid-task."""
    start, until = cpu_seconds(pid), time.monotonic() + timeout
    while cpu_seconds(pid) - start < busy and time.monotonic() < until:
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)


def gone_within(pids: list[int], seconds: float) -> bool:
    until = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < until:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)
