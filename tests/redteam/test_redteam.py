"""The red team: an adversarial attack (``leakbed/attacks/redteam.py``) tries every path we know to an
update's owner. Against the old layout (kept here as a fixture) each path works; run in its own
sandboxed lane during a real run, every path gives nothing beyond chance and every break-out probe
it runs from inside (every TCP port, capabilities...) holds. A run with the sandbox switched off
shows that the layout alone would not stop a file-system walk, nor the probes. The routes through
leakbed's interfaces (import-time code, scorers, links, bombs, floods, hangs, omission...) are
tried by a hostile plugin package in ``test_interfaces.py``.

``pytest -m redteam`` runs the red team alone.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from leakbed.attacks.breakout import HARMLESS
from leakbed.attacks.redteam import probe
from leakbed.core.config import ExperimentConfig
from leakbed.core.data import federation
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.store import UpdateStore
from leakbed.referee.score_redteam import probe_metrics
from tests.conftest import tiny_config

pytestmark = pytest.mark.redteam
PROBES = {"filesystem", "environment", "knowledge", "regenerate", "store-files", "arrival-order"}


def _old_layout(tmp: Path, seed: int = 7, rounds: int = 2) -> tuple[UpdateStore, AttackerKnowledge, dict, Path]:
    """A run folder as leakbed wrote it before the boundary was sealed: the store beside the
    referee under the prior's folder, the frozen config with the seed at the top, update ids drawn
    in sequence from ``default_rng([seed, 0x5A])``, the knowledge holding the experiment seed,
    updates filed in the devices' order, and (a deliberately leaky variant) a file per update
    named after its user."""
    cfg = tiny_config("data.synthetic.users=4", f"seed={seed}")
    fed = federation(cfg, "random")
    users = sorted(fed.user_ids)
    run = tmp / "run"
    (run / "random" / "referee").mkdir(parents=True)
    (run / "config.toml").write_text(f"name = 'old'\nseed = {seed}\n")
    store = UpdateStore(run / "random" / "store")
    rng = np.random.default_rng([seed, 0x5A])
    truth, ids_by_round = [], {}
    vec = np.random.default_rng(0)
    for rnd in range(1, rounds + 1):
        store.write_global(rnd, {"w": np.zeros(3, np.float32)})
        ids = [rng.bytes(8).hex() for _ in users]
        ids_by_round[rnd] = ids
        store.write_anon(rnd, "b0", ids, vec.normal(size=(len(users), 5)).astype(np.float32), np.full(len(users), 10))
        for i, u in zip(ids, users, strict=True):
            truth.append({"update_id": i, "user_id": u, "round": rnd})
            (store.root / "per-update").mkdir(exist_ok=True)
            (store.root / "per-update" / f"{i}-{u}.npy").write_bytes(b"")
    (run / "random" / "referee" / "truth.jsonl").write_text("\n".join(json.dumps(t) for t in truth) + "\n")
    knowledge = AttackerKnowledge(fed.prior(), replace(fed.corpus, users={}), cfg.model, ["w"], seed=seed)
    knowledge.save(store.root)
    return store, knowledge, {t["update_id"]: t for t in truth}, run


def _scored(found: dict, store: UpdateStore, truth: dict, users: int, rounds: int) -> dict:
    ids = [str(i) for i in store.read_anon()["ids"]]
    owners = np.asarray([truth[i]["user_id"] for i in ids])
    rnds = np.asarray([truth[i]["round"] for i in ids])
    return probe_metrics(found, ids, owners, rnds, users, rounds)["probes"]


@pytest.mark.long
def test_every_probe_recovers_owners_or_rounds_from_the_old_layout(tmp_path):
    store, knowledge, truth, run = _old_layout(tmp_path)
    # the old worker inherited the server's environment and could read its command line under /proc
    texts = [f"leakbed run quickstart --out {run}", "LEAKBED_HOME=/nonexistent"]
    found = probe(store, knowledge, cwd=store.root, texts=texts)
    assert set(found) == PROBES
    m = _scored(found, store, truth, users=4, rounds=2)
    assert m["filesystem"]["owner_accuracy"] == 1.0  # ../referee/truth.jsonl beside the store
    assert m["environment"]["owner_accuracy"] == 1.0  # --out on the server's command line
    assert m["knowledge"]["round_accuracy"] == 1.0  # the experiment seed in the knowledge regenerates ids
    assert m["regenerate"]["round_accuracy"] == 1.0  # ... and so does the seed in config.toml
    assert m["store-files"]["owner_accuracy"] == 1.0  # a user's name in a store file
    assert m["arrival-order"]["owner_accuracy"] == 1.0  # filed in the devices' order, unshuffled


def _run_with_redteam(tmp: Path, sandbox: str) -> dict:
    from leakbed.simulate import simulate

    cfg: ExperimentConfig = tiny_config(
        "fl.fraction_train=1.0", "attack.suite=['knn', 'redteam']", f"workers.sandbox='{sandbox}'", "seed=7"
    )
    # simulate() freezes the config (seed at the top) into tmp/config.toml, as `leakbed run` does
    summary = simulate(cfg, "random", tmp)
    assert not summary["attackers_failed"], summary["pool"]["errors"]
    return summary


@pytest.mark.slow
def test_a_sandboxed_worker_in_a_real_run_learns_nothing_and_cannot_break_out(tmp_path):
    summary = _run_with_redteam(tmp_path, "on")
    assert summary["attack_side"]["sandboxed"] is True and summary["attack_sandbox"].startswith("sandboxed")
    r = summary["suite"]["redteam"]
    assert r["breakout_held"] is True and set(r["breakout"]) == set(HARMLESS), r["breakout"]
    for name, p in r["probes"].items():
        assert not p["evidence"], f"{name} found {p['evidence']}"
        assert p["round_accuracy"] == 0.0, name  # no id was regenerated
        if name != "arrival-order":
            assert p["guessed"] == 0 and p["owner_accuracy"] == 0.0, name
    # the order probe guesses every update (all 6 users sampled each round): content order gives it chance
    order = r["probes"]["arrival-order"]
    assert order["guessed"] == 12 and order["owner_accuracy"] <= 0.5


@pytest.mark.slow
def test_without_the_sandbox_a_file_system_walk_finds_the_truth(tmp_path):
    """The layout keeps the truth out of the store's tree, but one process on one host can walk up:
    the sandbox is what makes the boundary physical. Even with the truth and the seed in hand, the
    keyed update ids cannot be regenerated. From an unsandboxed worker the run's own ports (Ray's) answer."""
    summary = _run_with_redteam(tmp_path, "off")
    assert summary["attack_side"]["sandboxed"] is False and summary["attack_sandbox"].startswith("NOT SANDBOXED")
    assert summary["suite"]["redteam"]["breakout"]["host-tcp-ports"] is False
    probes = summary["suite"]["redteam"]["probes"]
    assert probes["filesystem"]["owner_accuracy"] == 1.0
    assert probes["regenerate"]["round_accuracy"] == 0.0 and probes["knowledge"]["round_accuracy"] == 0.0
