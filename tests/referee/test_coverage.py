"""Every scorer leakbed ships scores over all the updates the attack was given: a missing or non-finite row counts
as a random ranking drawn by the referee, and the coverage is reported beside the score. The omission attack (keep
only the confident rows) raised the old scorers' numbers; these tests show it no longer does."""

from __future__ import annotations

import numpy as np
import pytest

from leakbed.core.reid_metrics import reid_metrics
from leakbed.referee.coverage import NOTE, Coverage
from leakbed.referee.kinds import KINDS
from leakbed.referee.score_linkage import given_pairs
from tests.referee.kit import Update, context, file_outputs, write_run

USERS, UPDATES = 20, 200
CLASSES = np.asarray([f"user{u:02d}" for u in range(USERS)])


def reid_case(seed: int = 0, noise: float = 1.0) -> tuple[list[Update], np.ndarray, np.ndarray, np.ndarray]:
    """200 updates of 20 users over 4 rounds, and softmax scores that are informative but noisy."""
    rng = np.random.default_rng(seed)
    owners = rng.permutation(CLASSES[np.arange(UPDATES) % USERS])
    ids = np.asarray([f"upd{i:04d}" for i in range(UPDATES)])
    logits = rng.normal(0.0, noise, (UPDATES, USERS))
    logits[np.arange(UPDATES), np.searchsorted(CLASSES, owners)] += 2.0
    scores = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    updates = [Update(str(i), str(o), 1 + k % 4) for k, (i, o) in enumerate(zip(ids, owners, strict=True))]
    return updates, ids, owners, scores


def reid_outputs(ids: np.ndarray, scores: np.ndarray) -> dict[str, np.ndarray]:
    return {"ids": ids, "rounds": np.ones(len(ids), np.int64), "classes": CLASSES, "scores": scores}


def test_dropping_the_least_confident_half_no_longer_raises_re_identification(tmp_path):
    updates, ids, owners, scores = reid_case()
    layout = write_run(tmp_path, updates)
    keep = np.sort(np.argsort(-scores.max(axis=1))[: UPDATES // 2])  # the attack's confident half
    file_outputs(layout, "honest", reid_outputs(ids, scores), list(ids))
    file_outputs(layout, "omits", reid_outputs(ids[keep], scores[keep]), list(ids))
    full = KINDS["reid"].score(context(layout, "honest", "reid"))
    omitted = KINDS["reid"].score(context(layout, "omits", "reid"))

    # the old scorer, on the returned rows only: the omission paid
    old = reid_metrics(owners[keep], CLASSES, scores[keep])
    assert old["ap"] > full["ap"] + 0.08 and old["top1"] > full["top1"] + 0.08

    assert full["coverage"] == 1.0 and full["rows_missing"] == 0 and full["n_updates"] == UPDATES
    assert omitted["coverage"] == 0.5 and omitted["rows_missing"] == 100 and omitted["n_updates"] == UPDATES
    assert omitted["rows_extra"] == omitted["rows_duplicate"] == 0
    assert omitted["chance_ap"] == pytest.approx(full["chance_ap"])  # the same test set: every given update
    assert full["chance_ap"] * 1.5 < omitted["ap"] < full["ap"] - 0.05  # half the signal kept, none gained
    # top-1: the kept rows as the attack ranked them, the others at chance (1/20) in expectation
    kept_hits = float((CLASSES[scores[keep].argmax(axis=1)] == owners[keep]).sum())
    expected = (kept_hits + 100 / USERS) / UPDATES
    assert omitted["top1"] < full["top1"] and omitted["top1"] == pytest.approx(expected, abs=0.04)
    assert any(NOTE in n for n in omitted["notes"]) and any("Coverage 50.0%" in n for n in omitted["notes"])


def test_the_omission_never_pays_over_seeds_and_noise(tmp_path):
    """Over several cases the omitted AP stays below the honest one (the referee's draws are its own, seeded)."""
    for seed, noise in [(1, 1.0), (2, 2.0), (3, 1.5)]:
        updates, ids, _owners, scores = reid_case(seed, noise)
        layout = write_run(tmp_path / f"s{seed}", updates)
        keep = np.argsort(-scores.max(axis=1))[: UPDATES // 2]
        file_outputs(layout, "honest", reid_outputs(ids, scores), list(ids))
        file_outputs(layout, "omits", reid_outputs(ids[keep], scores[keep]), list(ids))
        full = KINDS["reid"].score(context(layout, "honest", "reid"))
        again = [KINDS["reid"].score(context(layout, "omits", "reid"))["ap"] for _ in range(2)]
        assert again[0] == again[1] < full["ap"]  # reproducible, and lower


def test_extra_duplicate_and_non_finite_rows(tmp_path):
    updates, ids, owners, scores = reid_case()
    layout = write_run(tmp_path, updates)
    perfect = (owners[:, None] == CLASSES[None, :]).astype(float)
    stray = np.asarray([f"stray{i}" for i in range(10)])
    padded = {  # 10 rows for updates never given, then a second (perfect) row for 10 given ones
        "ids": np.r_[ids, stray, ids[:10]],
        "classes": CLASSES,
        "scores": np.r_[scores, perfect[:10], perfect[:10]],
    }
    file_outputs(layout, "honest", reid_outputs(ids, scores), list(ids))
    file_outputs(layout, "padded", padded, list(ids))
    broken = scores.copy()
    broken[:20, 3] = np.nan
    broken[20, 0] = np.inf
    file_outputs(layout, "broken", reid_outputs(ids, broken), list(ids))
    full = KINDS["reid"].score(context(layout, "honest", "reid"))
    pad = KINDS["reid"].score(context(layout, "padded", "reid"))
    assert pad["rows_extra"] == 10 and pad["rows_duplicate"] == 10 and pad["coverage"] == 1.0
    assert pad["ap"] == full["ap"] and pad["top1"] == full["top1"]  # the first row of an id is the one scored
    bad = KINDS["reid"].score(context(layout, "broken", "reid"))
    assert bad["rows_missing"] == 21 and bad["coverage"] == pytest.approx(179 / 200)
    assert np.isfinite(bad["ap"]) and bad["ap"] < full["ap"]


def test_given_ids_fall_back_to_the_store_and_rounds_are_the_stores(tmp_path):
    updates, ids, _owners, scores = reid_case()
    layout = write_run(tmp_path, updates)
    lying = reid_outputs(ids, scores) | {"rounds": np.full(UPDATES, 7, np.int64)}
    file_outputs(layout, "mlp", lying)  # no given.npy: every update in the store was given
    m = KINDS["reid"].score(context(layout, "mlp", "reid"))
    assert m["coverage"] == 1.0 and m["n_updates"] == UPDATES
    assert sorted(m["per_round"]) == [1, 2, 3, 4] and sum(r["n_updates"] for r in m["per_round"].values()) == UPDATES


def property_case(seed: int = 2) -> tuple[list[Update], np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    has = rng.random(UPDATES) < 0.5
    owners = CLASSES[np.arange(UPDATES) % USERS]
    ids = np.asarray([f"upd{i:04d}" for i in range(UPDATES)])
    scores = 1.0 / (1.0 + np.exp(-(2.0 * (has - 0.5) + rng.normal(0.0, 2.0, UPDATES))))
    fields = [{"has-property": int(h), "property-fraction": float(h) * 0.5} for h in has]
    updates = [Update(str(i), str(o), 1 + k % 4, f) for k, (i, o, f) in enumerate(zip(ids, owners, fields, strict=True))]
    return updates, ids, has, scores


def test_property_auc_covers_every_given_update(tmp_path):
    from sklearn.metrics import roc_auc_score

    updates, ids, has, scores = property_case()
    layout = write_run(tmp_path, updates)
    keep = np.sort(np.argsort(-np.abs(scores - 0.5))[: UPDATES // 2])  # the confident half
    rounds = np.ones(UPDATES, np.int64)
    file_outputs(layout, "honest", {"ids": ids, "rounds": rounds, "scores": scores}, list(ids))
    file_outputs(layout, "omits", {"ids": ids[keep], "rounds": rounds[keep], "scores": scores[keep]}, list(ids))
    params = {"holder_rate": 0.2}
    full = KINDS["property"].score(context(layout, "honest", "property", params))
    omitted = KINDS["property"].score(context(layout, "omits", "property", params))
    assert full["auc"] == pytest.approx(roc_auc_score(has, scores)) and full["coverage"] == 1.0
    assert roc_auc_score(has[keep], scores[keep]) > full["auc"] + 0.05  # what the old scorer reported
    assert omitted["coverage"] == 0.5 and omitted["rows_missing"] == 100 and omitted["updates"] == UPDATES
    assert 0.5 < omitted["auc"] < full["auc"] - 0.03


def test_attribute_and_identity_accuracy_count_missing_rows_as_uniform_guesses(tmp_path):
    rng = np.random.default_rng(4)
    attr = {u: int(rng.integers(0, 3)) for u in CLASSES}
    owners = rng.permutation(CLASSES[np.arange(UPDATES) % USERS])
    ids = np.asarray([f"upd{i:04d}" for i in range(UPDATES)])
    updates = [Update(str(i), str(o), 1, {"attr-interest": float(attr[o])}) for i, o in zip(ids, owners, strict=True)]
    layout = write_run(tmp_path, updates)
    right = rng.random(UPDATES) < 0.8
    guess_id = np.where(right, owners, CLASSES[(np.searchsorted(CLASSES, owners) + 1) % USERS])
    truth_attr = np.asarray([attr[o] for o in owners], float)
    guess_attr = np.where(right, truth_attr, (truth_attr + 1) % 3)

    def outputs(sel: np.ndarray) -> dict[str, np.ndarray]:
        return {
            "ids": ids[sel], "rounds": np.ones(len(ids[sel]), np.int64), "columns": np.asarray(["interest"]),
            "stl_id": guess_id[sel], "values/interest": np.asarray([0.0, 1.0, 2.0]),
            "stl_attr/interest": guess_attr[sel], "mtl_attr/interest": guess_attr[sel], "mtl_id/interest": guess_id[sel],
        }  # fmt: skip

    keep = np.flatnonzero(right)[:100]  # it returns only rows it got right
    file_outputs(layout, "honest", outputs(np.arange(UPDATES)), list(ids))
    file_outputs(layout, "omits", outputs(keep), list(ids))
    full = KINDS["attributes"].score(context(layout, "honest", "attributes"))
    omitted = KINDS["attributes"].score(context(layout, "omits", "attributes"))
    assert full["stl_deanon"] == pytest.approx(right.mean()) and full["stl_attr"] == pytest.approx(right.mean())
    assert omitted["coverage"] == 0.5 and omitted["rows_missing"] == 100 and omitted["n_updates"] == UPDATES
    # the old scorer: 100% on its own rows; now the kept rows count for half, the others at 1/|users| and 1/|values|
    assert omitted["stl_deanon"] == pytest.approx(0.5 + 0.5 / USERS, abs=0.04) and omitted["stl_deanon"] < full["stl_deanon"]
    assert omitted["stl_attr"] == pytest.approx(0.5 + 0.5 / 3, abs=0.06) and omitted["stl_attr"] < full["stl_attr"]
    assert omitted["deanon_chance"] == full["deanon_chance"] == 1 / USERS


def test_aggregates_are_the_referees_rounds_not_the_attacks_members(tmp_path):
    rng = np.random.default_rng(5)
    updates, has_round = [], {}
    for rnd in range(1, 9):
        held = rnd % 2 == 0
        has_round[rnd] = held
        for k in range(3):
            fields = {"has-property": int(held and k == 0)}
            updates.append(Update(f"r{rnd}-{k}", f"user{k:02d}", rnd, fields))
    layout = write_run(tmp_path, updates)
    rounds = np.asarray([1, 2, 3, 4, 99], np.int64)  # four of eight rounds, and one that holds no given update
    scores = np.asarray([0.1, 0.9, 0.2, 0.8, 0.5]) + rng.normal(0, 0.01, 5)
    lies = np.asarray(["r2-0 r4-0 r6-0"] * 5)  # members the attack claims: not read
    file_outputs(layout, "agg", {"rounds": rounds, "scores": scores, "members": lies}, [u.uid for u in updates])
    m = KINDS["aggregate-property"].score(context(layout, "agg", "aggregate-property"))
    assert m["aggregates"] == 8 and m["with_property"] == 4 and m["n_updates"] == 24
    assert m["coverage"] == 0.5 and m["rows_missing"] == 4 and m["rows_extra"] == 1
    assert 0.0 <= m["auc"] <= 1.0


def test_linkage_pairs_follow_the_given_order_and_missing_pairs_are_drawn():
    rng = np.random.default_rng(6)
    ids = np.asarray([f"u{i}" for i in range(6)])
    iu = np.triu_indices(6, 1)
    attack = {(ids[a], ids[b]): float(s) for a, b, s in zip(*iu, rng.random(len(iu[0])), strict=True)}
    scores = np.asarray([attack[(ids[a], ids[b])] for a, b in zip(*iu, strict=True)])
    given = ids[[3, 0, 5, 1, 4, 2]]
    cov = Coverage(given, ids, rng=np.random.default_rng(0))
    got = given_pairs(cov, 6, scores)
    gi, gj = np.triu_indices(6, 1)
    want = [attack.get((given[a], given[b]), attack.get((given[b], given[a]))) for a, b in zip(gi, gj, strict=True)]
    assert np.allclose(got, want)
    partial = Coverage(np.r_[given, ["u9"]], ids, rng=np.random.default_rng(0))  # one given update without a row
    drawn = given_pairs(partial, 6, scores)
    assert len(drawn) == 21 and np.isfinite(drawn).all() and partial.report()["coverage"] == pytest.approx(6 / 7)
    assert scores.min() <= drawn[-6:].min() and drawn[-6:].max() <= scores.max()  # a random rank among the real ones
