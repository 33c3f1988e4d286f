"""Each of the other kinds scores over every given update when the attack left rows out: the coverage fields are
there and right, the metrics finite, and an honest attack's numbers are not beaten by leaving rows out."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from leakbed.core.linkage_views import VARIANTS
from leakbed.core.record_hash import record_hash
from leakbed.referee.kinds import KINDS
from tests.referee.kit import Update, context, file_outputs, write_run

N, K = 60, 6
USERS = np.asarray([f"user{u}" for u in range(K)])


def case(tmp_path, fields=None):  # noqa: ANN001, ANN201
    rng = np.random.default_rng(7)
    owners = rng.permutation(USERS[np.arange(N) % K])
    ids = np.asarray([f"upd{i:03d}" for i in range(N)])
    fact = fields or (lambda k, o: None)
    updates = [Update(str(i), str(o), 1 + k % 3, fact(k, o)) for k, (i, o) in enumerate(zip(ids, owners, strict=True))]
    return write_run(tmp_path, updates), ids, owners, rng


def embeddings(owners: np.ndarray, rng: np.random.Generator, noise: float = 0.7) -> np.ndarray:
    centres = {u: rng.normal(size=8) for u in USERS}
    return np.stack([centres[o] + rng.normal(0, noise, 8) for o in owners])


def head() -> dict[str, np.ndarray]:
    return {"head_w": -np.ones(8), "head_b": np.asarray([4.0])}


def coverage_of(m: dict) -> tuple[float, int, int]:
    return m["coverage"], m["rows_missing"], m["n_updates"]


def test_matching(tmp_path):
    layout, ids, owners, rng = case(tmp_path)
    emb = embeddings(owners, rng)
    out = {"ids": ids, "emb": emb, "shadow_emb": emb[:12], "shadow_labels": owners[:12], **head()}
    keep = np.arange(N) < N // 2
    file_outputs(layout, "full", out, list(ids))
    file_outputs(layout, "half", {**out, "ids": ids[keep], "emb": emb[keep]}, list(ids))
    nan = emb.copy()
    nan[:6] = np.nan
    file_outputs(layout, "nan", {**out, "emb": nan}, list(ids))
    params = {"eval_pairs": 2000}
    full = KINDS["matching"].score(context(layout, "full", "matching", params))
    half = KINDS["matching"].score(context(layout, "half", "matching", params))
    nans = KINDS["matching"].score(context(layout, "nan", "matching", params))
    assert coverage_of(full) == (1.0, 0, N) and coverage_of(half) == (0.5, 30, N) and coverage_of(nans) == (0.9, 6, N)
    assert full["ap"] > 0.8 and 0.5 < half["ap"] < full["ap"] and nans["ap"] < full["ap"]
    assert half["pairs"] == full["pairs"] == 2000
    lost = {**out, "head_w": np.full(8, np.nan)}  # a non-finite head: no row is usable
    file_outputs(layout, "lost", lost, list(ids))
    gone = KINDS["matching"].score(context(layout, "lost", "matching", params))
    assert gone["coverage"] == 0.0 and gone["ap"] == pytest.approx(0.5, abs=0.05)


def test_cross_modal(tmp_path):
    layout, ids, owners, rng = case(tmp_path)
    centres = {u: rng.normal(size=8) for u in USERS}
    emb = np.stack([centres[o] + rng.normal(0, 0.5, 8) for o in owners])
    user_emb = np.stack([centres[u] for u in USERS])
    out = {"ids": ids, "emb": emb, "users": USERS, "user_emb": user_emb, "paired": USERS[:3], "encoder": np.asarray("tfidf"),
           **head()}  # fmt: skip
    file_outputs(layout, "full", out, list(ids))
    file_outputs(layout, "half", {**out, "ids": ids[::2], "emb": emb[::2]}, list(ids))
    params = {"siamese": {"eval_pairs": 2000}}
    full = KINDS["cross-modal"].score(context(layout, "full", "cross-modal", params))
    half = KINDS["cross-modal"].score(context(layout, "half", "cross-modal", params))
    assert coverage_of(full) == (1.0, 0, N) and coverage_of(half) == (0.5, 30, N)
    assert full["ap"] > 0.8 and half["ap"] < full["ap"] and half["rank_ap"] < full["rank_ap"]


def test_open_world(tmp_path):
    layout, ids, owners, rng = case(tmp_path)
    seen, holdout = USERS[:3], USERS[5:]
    classes = np.r_[seen, ["<unseen>"]]
    label = np.where(np.isin(owners, seen), owners, "<unseen>")
    scores = (label[:, None] == classes[None, :]) + rng.normal(0, 0.6, (N, 4))
    out = {"ids": ids, "seen": seen, "holdout": holdout, "classes": classes, "scores": scores,
           "emb": embeddings(owners, rng), **head()}  # fmt: skip
    file_outputs(layout, "full", out, list(ids))
    file_outputs(layout, "half", {**out, "ids": ids[::2], "scores": scores[::2], "emb": out["emb"][::2]}, list(ids))
    params = {"siamese": {"eval_pairs": 1000}}
    full = KINDS["open-world"].score(context(layout, "full", "open-world", params))
    half = KINDS["open-world"].score(context(layout, "half", "open-world", params))
    assert coverage_of(half) == (0.5, 30, N) and half["test_updates"] == full["test_updates"] == 50
    assert half["ap"] < full["ap"] and half["match_ap"] < full["match_ap"]


def test_profile(tmp_path):
    share = {u: np.eye(3)[0] * (0.8 if u in USERS[:2] else 0.1) for u in USERS}
    layout, ids, owners, rng = case(tmp_path, lambda k, o: {"label-share": share[o].tolist()})
    fits = np.isin(owners, USERS[:2])
    scores = fits + rng.normal(0, 0.4, N)
    out = {"ids": ids, "scores": scores, "target_class": np.asarray(0)}
    keep = np.argsort(-np.abs(scores - 0.5))[:30]
    file_outputs(layout, "full", out, list(ids))
    file_outputs(layout, "half", {**out, "ids": ids[keep], "scores": scores[keep]}, list(ids))
    params = {"fit_ratio": 1.5, "top_k": 3}
    full = KINDS["profile"].score(context(layout, "full", "profile", params))
    half = KINDS["profile"].score(context(layout, "half", "profile", params))
    assert coverage_of(half) == (0.5, 30, N) and half["ap"] < full["ap"] and full["ap"] > 0.7


def test_metadata(tmp_path):
    from leakbed.core.config import ExperimentConfig

    layout, ids, owners, rng = case(tmp_path)
    truth = (owners[:, None] == USERS[None, :]).astype(float)
    mats = {k: truth + rng.normal(0, 0.8, (N, K)) for k in ("meta", "count_only", "weights_mlp", "fused_mlp")}
    out = {"ids": ids, "classes": USERS, **mats, "rule": np.asarray("exact"), "scale": np.asarray(1.0),
           "norm_slope": np.asarray(0.5)}  # fmt: skip
    cfg = ExperimentConfig()
    file_outputs(layout, "full", out, list(ids))
    file_outputs(layout, "half", {**out, "ids": ids[:30], **{k: v[:30] for k, v in mats.items()}}, list(ids))
    full = KINDS["metadata"].score(context(layout, "full", "metadata", cfg=cfg))
    half = KINDS["metadata"].score(context(layout, "half", "metadata", cfg=cfg))
    assert "mlp" in full["fused"] and coverage_of(half) == (0.5, 30, N)
    assert half["ap"] < full["ap"] and half["fused"]["mlp"]["ap"] < full["fused"]["mlp"]["ap"]
    assert sorted(half["per_round"]) == [1, 2, 3]


def test_linkage(tmp_path):
    layout, ids, owners, rng = case(tmp_path, lambda k, o: {"node": f"node-{o}"})

    def outputs(sel: np.ndarray) -> dict[str, np.ndarray]:
        n, o = len(sel), owners[sel]
        iu = np.triu_indices(n, 1)
        pairs = (o[iu[0]] == o[iu[1]]) + rng.normal(0, 0.5, len(iu[0]))
        labels = np.searchsorted(USERS, o)
        single = (o[:, None] == USERS[None, :]) + rng.normal(0, 1.0, (n, K))
        cand = np.ones((n, K))
        return {
            "ids": ids[sel], "cannot_link": np.asarray(False), "groups": np.asarray(K),
            **{f"pairs_{v}": pairs for v in VARIANTS}, **{f"labels_{v}": labels for v in VARIANTS},
            "single_attacker": np.asarray("mlp"), "single_classes": USERS, "single_raw": single, "single_linked": single,
            "pseudonyms": np.asarray([f"node-{u}" for u in USERS]), "inter_candidates": cand, "inter_single": cand,
            "inter_linked": cand + 0.1 * single,
        }  # fmt: skip

    file_outputs(layout, "full", outputs(np.arange(N)), list(ids))
    file_outputs(layout, "half", outputs(np.arange(0, N, 2)), list(ids))
    full = KINDS["linkage"].score(context(layout, "full", "linkage"))
    half = KINDS["linkage"].score(context(layout, "half", "linkage"))
    assert coverage_of(half) == (0.5, 30, N)
    assert full["views"]["both"]["pairs"] == half["views"]["both"]["pairs"] == N * (N - 1) // 2
    assert full["ap"] > 0.6 and half["ap"] < full["ap"] and half["ari"] < full["ari"] == 1.0
    bad = outputs(np.arange(N)) | {"pairs_both": np.zeros(5)}
    file_outputs(layout, "bad", bad, list(ids))
    with pytest.raises(Exception, match="'pairs_"):
        KINDS["linkage"].score(context(layout, "bad", "linkage"))


def test_redteam_missing_entries_are_no_guess(tmp_path):
    from leakbed.core.config import ExperimentConfig

    layout, ids, owners, rng = case(tmp_path)
    from leakbed.core.store import UpdateStore

    order = [str(i) for i in UpdateStore(layout.store("random")).anon_ids()]
    truth = dict(zip(ids, owners, strict=True))
    probe = {"owner": [truth[i] for i in order][:30], "round": [1] * 30, "evidence": ["x\x1b[2Jy"]}
    found = {"probes": {"cheat": probe}, "breakout": {"net": {"held": True, "detail": "ok"}}}
    file_outputs(layout, "redteam", {"found": np.asarray(json.dumps(found))}, list(ids))
    m = KINDS["redteam"].score(context(layout, "redteam", "redteam", cfg=ExperimentConfig()))
    assert m["probes"]["cheat"]["owner_accuracy"] == 0.5 and coverage_of(m) == (0.5, 30, N)
    assert [e.replace(" ", "") for e in m["probes"]["cheat"]["evidence"]] == ["xy"]  # the escape is gone


def test_membership_missing_vocabularies_are_a_fair_coin(tmp_path):
    rng = np.random.default_rng(8)
    private = [rng.integers(1, 50, 6) for _ in range(40)]
    held = [rng.integers(50, 100, 6) for _ in range(40)]  # tokens no batch holds: never a member
    batches = [private[4 * k : 4 * k + 4] for k in range(10)]
    ids = [f"m{k}" for k in range(10)]
    updates = [Update(i, "user0", 1, {"batch-records": [record_hash(x) for x in b]}) for i, b in zip(ids, batches, strict=True)]
    layout = write_run(tmp_path, updates)
    data = SimpleNamespace(x=private, y=[0] * 40)
    test = SimpleNamespace(x=held, y=[0] * 40)
    fed = SimpleNamespace(user_ids=["user0"], private=lambda pid: data, splits={"user0": SimpleNamespace(test=test)})
    vocab = np.zeros((10, 128), bool)
    for k, b in enumerate(batches):
        vocab[k, np.concatenate(b)] = True
    out = {"ids": np.asarray(ids), "rounds": np.ones(10, np.int64), "vocab": np.packbits(vocab, axis=1),
           "vocab_size": np.asarray(128)}  # fmt: skip

    def score(name: str) -> dict:
        ctx = context(layout, name, "membership")
        ctx.__dict__["federation"] = fed
        return KINDS["membership"].score(ctx)

    file_outputs(layout, "full", out, ids)
    file_outputs(layout, "half", {**out, "ids": out["ids"][:5], "rounds": out["rounds"][:5], "vocab": out["vocab"][:5]}, ids)
    full, half = score("full"), score("half")
    assert full["precision"] == 1.0 and full["recall"] == 1.0 and full["members_tested"] == 40
    assert coverage_of(half) == (0.5, 5, 10) and half["members_tested"] == 40
    assert half["recall"] < 1.0 and half["precision"] < 1.0  # the coin was tossed for 20 members and 20 others


def test_reconstruction_scores_non_finite_rows_as_noise(tmp_path):
    rng = np.random.default_rng(9)
    images = [rng.random((1, 4, 4)).astype(np.float32) for _ in range(8)]
    ids = [f"p{k}" for k in range(4)]
    batches = [images[2 * k : 2 * k + 2] for k in range(4)]
    updates = [Update(i, "user0", 1, {"batch-records": [record_hash(x) for x in b]}) for i, b in zip(ids, batches, strict=True)]
    layout = write_run(tmp_path, updates)
    prior = SimpleNamespace(x=np.stack(images[:2]) * 0.0 + 0.5, y=np.zeros(2, np.int64))
    data = SimpleNamespace(x=images, y=[0] * 8)
    fed = SimpleNamespace(
        user_ids=["user0"], private=lambda pid: data, corpus=SimpleNamespace(num_classes=2),
        splits={"user0": SimpleNamespace(prior=prior, test=SimpleNamespace(x=[], y=[]))},
    )  # fmt: skip
    recon = np.concatenate([np.stack(batches[0]).reshape(2, -1), np.full((2, 16), np.nan)]).astype(np.float32)
    out = {
        "ids": np.asarray(["p0", "p1", "stray"]), "rounds": np.ones(3, np.int64), "counts": np.asarray([2, 2, 0]),
        "steps": np.ones(3, np.int64), "batch_size": np.full(3, 2), "recon": recon, "probs": np.full(4, 0.5, np.float32),
        "skipped": np.asarray(0), "space": np.asarray("pixels"),
    }  # fmt: skip
    file_outputs(layout, "dlg", out, ids)
    ctx = context(layout, "dlg", "reconstruction")
    ctx.__dict__["federation"] = fed
    m = KINDS["reconstruction"].score(ctx)
    assert m["updates"] == 2 and m["rows_extra"] == 1 and m["rows_missing"] == 3 and m["coverage"] == 0.25
    assert m["recovered"] == pytest.approx(0.5)  # p0 recovered exactly, p1's NaN scored as the referee's noise
    bad = {**out, "counts": np.asarray([2, 2, 1])}
    file_outputs(layout, "bad", bad, ids)
    with pytest.raises(Exception, match="'counts' must be non-negative and sum to the 4 rows of 'recon'"):
        KINDS["reconstruction"].score(context(layout, "bad", "reconstruction"))
