"""Metadata re-identification and cross-round linkage on synthetic stores (issue 12): they find users
from what a report carries besides its weights when sizes differ, and fall to chance when they do not.

Every user has a data size n_u; the attacker's prior is half of it (as ``split.prior_fraction = 0.5``)
and the device reports its private share as n_k; the norm of its Δw grows with its local steps
(√n_k) times a per-round factor; its Δw direction is a per-user direction plus noise ("biased
users") or noise alone (the IID-like control, where only metadata can link).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from leakbed.attacks import linkage, metadata
from leakbed.core.config import AttackConfig, ExperimentConfig, ModelConfig
from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.store import UpdateStore
from leakbed.defenses.count_report import bucketed
from leakbed.referee.seal import Sealer
from leakbed.referee.truth import Referee
from tests.attacks.reid_store import folder_of, run_hooks, score_with

ATTACK = AttackConfig(suite=["knn", "metadata", "linkage"], params={"knn": {"k": 5}})
CFG = ExperimentConfig(attack=ATTACK)


def make_store(
    tmp: Path,
    *,
    spread: float = 0.6,
    biased: bool = True,
    report: str = "exact",
    users: int = 30,
    rounds: int = 10,
    per_round: int = 8,
    dim: int = 32,
    seed: int = 0,
) -> tuple[UpdateStore, Referee, AttackerKnowledge]:
    rng = np.random.default_rng(seed)
    ids = [f"user{u:02d}" for u in range(users)]
    sizes = {u: max(20, int(round(100 * rng.lognormal(0.0, spread)))) if spread else 100 for u in ids}
    prior_n = {u: int(round(0.5 * sizes[u])) for u in ids}
    private = {u: sizes[u] - prior_n[u] - int(round(0.2 * (sizes[u] - prior_n[u]))) for u in ids}
    dirs = {u: rng.normal(size=dim) for u in ids}
    store, sealer = UpdateStore(tmp / "store"), Sealer(tmp / "referee")
    names = {u: sealer.pseudonym(i + 1) for i, u in enumerate(ids)}

    def vec(u: str) -> np.ndarray:
        v = (dirs[u] if biased else 0.0) + rng.normal(scale=1.5, size=dim)
        return (v / np.linalg.norm(v)).astype(np.float32)

    for r in range(1, rounds + 1):
        store.write_shadow(r, ids, np.stack([vec(u) for u in ids]))
        chosen = [ids[k] for k in rng.choice(users, per_round, replace=False)]
        upd = [sealer.new_update_id() for _ in chosen]
        counts = np.asarray([REPORTS[report](private[u]) for u in chosen])
        norms = np.asarray([math.sqrt(private[u]) * (1.0 / r) * rng.lognormal(0.0, 0.05) for u in chosen])
        meta = {"norm": norms, "sparsity": np.zeros(per_round), "nbytes": np.full(per_round, 4096)}
        store.write_anon(r, "b0", upd, np.stack([vec(u) for u in chosen]), counts, meta)
        for uid, u in zip(upd, chosen, strict=True):
            sealer.seal(uid, u, r, {"node": names[u]})
        folder = folder_of(store, "linkage") / linkage.FOLDER  # what its on_round keeps of the round, in its own folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"r{r:06d}.json").write_text(
            f'{{"participants": {per_round}, "sampled": "{",".join(sorted(names[u] for u in chosen))}"}}'
        )
    prior = {
        u: UserData(np.zeros((prior_n[u], 1, 4, 4), np.float32), np.zeros(prior_n[u], np.int64), np.arange(float(prior_n[u])))
        for u in ids
    }
    knowledge = AttackerKnowledge(prior, Corpus("synthetic", "multiclass", 2, (1, 4, 4), {}), ModelConfig(), ["fc.weight"], 7)
    return store, Referee.load(tmp / "referee"), knowledge


REPORTS = {"exact": lambda n: n, "bucket": bucketed, "constant": lambda _n: 1}  # what the count defenses report


def scored_metadata(tmp: Path, **kw: object) -> dict:
    store, referee, knowledge = make_store(tmp, **kw)
    run_hooks(store, knowledge, "metadata", ATTACK)
    return score_with(store, referee, "metadata", tmp, CFG)


def test_reported_counts_bucket_to_powers_of_two_or_a_constant():
    assert bucketed(100) == 128 and bucketed(90) == 64 and bucketed(1) == 1
    assert metadata.report_rule(np.asarray([64, 128, 32, 64, 16, 256, 64, 8])) == "pow2"
    assert metadata.report_rule(np.asarray([1, 1, 1])) == "constant"
    assert metadata.report_rule(np.asarray([40, 41, 77])) == "exact"


def test_metadata_reidentifies_users_of_unequal_size_well_above_chance(tmp_path):
    m = scored_metadata(tmp_path, spread=0.6, biased=False)
    assert m["report_rule"] == "exact"
    assert m["x_chance"] > 4.0, m  # 30 users: sizes alone pick out most
    assert m["top1"] > 0.3
    assert 0.5 < m["size_scale"] < 1.2  # the device keeps 0.4 of a user's data, the prior holds 0.5: s = 0.8
    # weights carry nothing here (IID-like), the fused attack keeps what metadata gives
    assert m["weights"]["knn"]["x_chance"] < 1.6
    assert m["fused"]["knn"]["x_chance"] > 0.8 * m["x_chance"]
    assert set(m["per_round"]) == set(range(1, 11))


@pytest.mark.parametrize("seed", [0, 1])
def test_metadata_is_at_chance_when_every_user_holds_as_many_examples(tmp_path, seed):
    # 300 updates: a random ranking's × chance has sd 0.10 here (1st-99th percentile 0.81-1.23)
    m = scored_metadata(tmp_path, spread=0.0, biased=False, seed=seed, rounds=30, per_round=10)
    assert m["report_rule"] == "constant"
    assert 0.7 < m["x_chance"] < 1.3, m


def test_constant_count_reports_bring_metadata_reidentification_to_chance(tmp_path):
    m = scored_metadata(tmp_path, spread=0.6, biased=False, report="constant", rounds=30, per_round=10)
    assert m["report_rule"] == "constant"
    assert 0.7 < m["x_chance"] < 1.3, m


def test_bucketed_counts_leave_less_but_the_norm_still_tells_size(tmp_path):
    exact = scored_metadata(tmp_path / "e", spread=0.6, biased=False)
    bucket = scored_metadata(tmp_path / "b", spread=0.6, biased=False, report="bucket")
    assert bucket["report_rule"] == "pow2"
    assert 1.5 < bucket["x_chance"] < exact["x_chance"]
    assert bucket["count_only"]["x_chance"] < bucket["x_chance"]  # the norm adds what the buckets hide


def test_linkage_ap_is_above_its_chance_on_biased_users(tmp_path):
    store, referee, knowledge = make_store(tmp_path, spread=0.6, biased=True)
    run_hooks(store, knowledge, "linkage", ATTACK)
    m = score_with(store, referee, "linkage", tmp_path, CFG)
    views = m["views"]
    assert views["w"]["x_chance"] > 3.0, views
    assert views["meta"]["x_chance"] > 3.0, views
    assert views["both"]["ari"] > 0.3
    assert m["cannot_link"]
    inter = m["intersection"]
    assert inter["linked"]["x_chance"] > inter["alone"]["x_chance"] > 1.0
    # a user sampled in 2-3 of 10 rounds (8 of 30 a round) still shares every sampled set with a few others
    assert inter["perfect_linking"]["x_chance"] >= inter["linked"]["x_chance"]
    assert inter["perfect_linking"]["top1"] > 0.6


def test_linkage_without_size_or_bias_signal_is_at_chance(tmp_path):
    store, referee, knowledge = make_store(tmp_path, spread=0.0, biased=False)
    for f in (store.root / "anon").glob("*.npz"):  # norms independent of the user: no signal at all
        with np.load(f) as z:
            arrays = dict(z)
        arrays["meta_norm"] = np.random.default_rng(3).lognormal(0.0, 0.3, len(arrays["ids"]))
        np.savez(f, **arrays)
    run_hooks(store, knowledge, "linkage", ATTACK)
    m = score_with(store, referee, "linkage", tmp_path, CFG)
    for v in ("meta", "w"):
        assert m["views"][v]["x_chance"] < 1.6, m["views"]
