"""One small run per scorer kind, with an honest output that beats chance on every part it could leave out (every
row's owner ranked first, every user's column, pair, label, sample and probe better than a random guess), and the
same output cut to any subset of its rows and of its classes: what ``test_subsets.py`` draws from.

A case's ``outputs(rows, classes)`` is the honest output keeping the rows and classes the two boolean masks select
(classes: the users, seen classes, attribute columns, shadow users or reconstructed samples the output names);
``score(rows, classes, attack)`` is the referee's result for it, drawn with the fill seeded by ``attack``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from leakbed.core.attack_sets import paired_users, split_users
from leakbed.core.config import ExperimentConfig
from leakbed.core.knowledge import KNOWLEDGE_JSON
from leakbed.core.labels import UNSEEN
from leakbed.core.layout import RunLayout
from leakbed.core.linkage_views import VARIANTS
from leakbed.core.record_hash import record_hash
from leakbed.referee.kinds import KINDS
from leakbed.referee.schemas import OUTPUTS, check_outputs
from tests.referee.kit import RULE, Update, context, write_run

K = 6  # users
N = 36  # anonymous updates, over 3 rounds
SEED = 11  # the attacker's own seed, as its knowledge carries it
USERS = np.asarray([f"user{u}" for u in range(K)])
Outputs = dict[str, np.ndarray]


@dataclass
class Case:
    kind: str
    layout: RunLayout
    given: list[str]
    build: Callable[[np.ndarray, np.ndarray], Outputs]
    n_rows: int
    n_classes: int  # 0: the kind names no classes
    headline: tuple[str, ...]  # result keys, dotted into nested results
    chance: tuple[str, ...] = ()  # the fields that must not move with a subset: the referee's sets
    params: dict[str, Any] = field(default_factory=dict)
    cfg: ExperimentConfig = field(default_factory=ExperimentConfig)
    federation: Any = None
    rows_drawn: bool = True  # False: which rows it returns is the kind's documented choice (reconstruction's updates)

    def outputs(self, rows: np.ndarray | None = None, classes: np.ndarray | None = None) -> Outputs:
        rows = np.ones(self.n_rows, bool) if rows is None else np.asarray(rows, bool)
        classes = np.ones(self.n_classes, bool) if classes is None else np.asarray(classes, bool)
        return self.build(rows, classes)

    def score(self, rows: np.ndarray | None = None, classes: np.ndarray | None = None, attack: str = "twin") -> dict:
        out = self.outputs(rows, classes)
        check_outputs(out, OUTPUTS[self.kind])  # what the referee checks before a kind's scorer
        ctx = context(self.layout, attack, self.kind, self.params, self.cfg, attack=attack)
        ctx.__dict__["outputs"] = out
        ctx.__dict__["given"] = np.asarray(self.given, str)
        if self.federation is not None:
            ctx.__dict__["federation"] = self.federation
        return KINDS[self.kind].score(ctx)


def value(result: dict, key: str) -> float:
    """A headline number of a result (``fused.mlp.ap``: nested)."""
    for part in key.split("."):
        result = result[part]
    return float(result)  # type: ignore[arg-type]


def knowledge_file(layout: RunLayout, users: list[str], seed: int = SEED) -> None:
    """The part of the attacker's knowledge the referee reads (``core.knowledge``: users and seed), as the pool files it."""
    doc = {"users": [{"id": u, "attrs": []} for u in users], "seed": seed}
    (layout.store(RULE) / KNOWLEDGE_JSON).write_text(json.dumps(doc), encoding="utf-8")


def population(tmp: Path, fields: Callable[[int, str], dict | None] | None = None, seed: int = 0):  # noqa: ANN201
    """N updates of K users over three rounds, filed and sealed: (layout, ids, owners, rng)."""
    rng = np.random.default_rng(seed)
    owners = rng.permutation(USERS[np.arange(N) % K])
    ids = np.asarray([f"upd{i:03d}" for i in range(N)])
    fact = fields or (lambda k, o: None)
    updates = [Update(str(i), str(o), 1 + k % 3, fact(k, o)) for k, (i, o) in enumerate(zip(ids, owners, strict=True))]
    return write_run(tmp, updates), ids, owners, rng


def ranking(labels: np.ndarray, classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Scores whose every row ranks its own class first, with the columns still out of order across rows (AP < 1)."""
    own = 0.5 + 0.5 * rng.random(len(labels))
    scores = own[:, None] * rng.uniform(0.0, 0.95, (len(labels), len(classes)))
    hit = labels[:, None] == classes[None, :]
    scores[hit] = own[hit.any(axis=1)]
    return scores


def embeddings(owners: np.ndarray, rng: np.random.Generator, centres: dict | None = None) -> tuple[np.ndarray, dict]:
    centres = centres or {u: rng.normal(0.0, 1.0, 8) for u in USERS}
    return np.stack([centres[o] + rng.normal(0.0, 0.4, 8) for o in owners]), centres


HEAD = {"head_w": -np.ones(8), "head_b": np.asarray([4.0])}


def reid(tmp: Path) -> Case:
    layout, ids, owners, rng = population(tmp)
    knowledge_file(layout, list(USERS[::-1]))  # the referee's users in the knowledge's order, not the attack's
    scores = ranking(owners, USERS, rng)
    rounds = np.ones(N, np.int64)

    def build(rows: np.ndarray, cls: np.ndarray) -> Outputs:
        return {"ids": ids[rows], "rounds": rounds[rows], "classes": USERS[cls], "scores": scores[np.ix_(rows, cls)]}

    return Case("reid", layout, list(ids), build, N, K, ("ap", "x_chance", "top1", "top5"), ("chance_ap", "n_users"))


def metadata(tmp: Path) -> Case:
    layout, ids, owners, rng = population(tmp)
    knowledge_file(layout, list(USERS))
    mats = {k: ranking(owners, USERS, rng) for k in ("meta", "count_only", "weights_mlp", "fused_mlp")}

    def build(rows: np.ndarray, cls: np.ndarray) -> Outputs:
        return {"ids": ids[rows], "classes": USERS[cls], **{k: v[np.ix_(rows, cls)] for k, v in mats.items()},
                "rule": np.asarray("exact"), "scale": np.asarray(1.0), "norm_slope": np.asarray(0.5)}  # fmt: skip

    head = ("ap", "top1", "top5", "count_only.ap", "weights.mlp.ap", "fused.mlp.ap", "fused.mlp.top1")
    return Case("metadata", layout, list(ids), build, N, K, head, ("chance_ap", "n_users"))


def open_world(tmp: Path) -> Case:
    layout, ids, owners, rng = population(tmp)
    knowledge_file(layout, list(USERS))
    split = split_users(list(USERS), SEED, 0.5, 1 / 3)
    classes = np.asarray([*split["seen"], UNSEEN])
    labels = np.where(np.isin(owners, split["seen"]), owners, UNSEEN)
    scores = ranking(labels, classes, rng)
    emb, _ = embeddings(owners, rng)
    params = {"siamese": {"eval_pairs": 400}, "seen_fraction": 0.5, "holdout_fraction": 1 / 3}

    def build(rows: np.ndarray, cls: np.ndarray) -> Outputs:
        return {"ids": ids[rows], "seen": np.asarray(split["seen"]), "holdout": np.asarray(split["holdout"]),
                "classes": classes[cls], "scores": scores[np.ix_(rows, cls)], "emb": emb[rows], **HEAD}  # fmt: skip

    head = ("ap", "top1", "seen_top1", "unseen_recall", "match_ap", "match_auc")
    return Case("open-world", layout, list(ids), build, N, len(classes), head, ("chance_ap", "test_updates"), params)


def matching(tmp: Path) -> Case:
    layout, ids, owners, rng = population(tmp)
    knowledge_file(layout, list(USERS))
    emb, centres = embeddings(owners, rng)
    shadow_labels = np.repeat(USERS, 2)
    shadow, _ = embeddings(shadow_labels, rng, centres)

    def build(rows: np.ndarray, cls: np.ndarray) -> Outputs:
        keep = np.isin(shadow_labels, USERS[cls])
        return {"ids": ids[rows], "emb": emb[rows], "shadow_emb": shadow[keep], "shadow_labels": shadow_labels[keep], **HEAD}

    return Case("matching", layout, list(ids), build, N, K, ("ap", "auc", "prior_ap", "prior_auc"), ("chance",),
                {"eval_pairs": 400})  # fmt: skip


def cross_modal(tmp: Path) -> Case:
    layout, ids, owners, rng = population(tmp)
    knowledge_file(layout, list(USERS))
    emb, centres = embeddings(owners, rng)
    user_emb = np.stack([centres[u] for u in USERS])
    paired = np.asarray(paired_users(list(USERS), SEED, 0.5))
    params = {"siamese": {"eval_pairs": 400}, "paired_fraction": 0.5}

    def build(rows: np.ndarray, cls: np.ndarray) -> Outputs:
        return {"ids": ids[rows], "emb": emb[rows], "users": USERS[cls], "user_emb": user_emb[cls], "paired": paired,
                "encoder": np.asarray("tfidf"), **HEAD}  # fmt: skip

    head = ("ap", "auc", "text_only_ap", "text_only_auc", "rank_ap", "rank_top1")
    return Case("cross-modal", layout, list(ids), build, N, K, head, ("chance", "rank_chance_ap"), params)


def profile(tmp: Path) -> Case:
    share = {u: (np.eye(3)[0] * (0.8 if u in USERS[:2] else 0.1)).tolist() for u in USERS}
    layout, ids, owners, rng = population(tmp, lambda k, o: {"label-share": share[o]})
    scores = np.isin(owners, USERS[:2]) + 1.2 * rng.random(N)

    def build(rows: np.ndarray, cls: np.ndarray) -> Outputs:
        return {"ids": ids[rows], "scores": scores[rows], "target_class": np.asarray(0)}

    return Case("profile", layout, list(ids), build, N, 0, ("precision_at_k", "ap"), ("chance", "chance_ap"),
                {"fit_ratio": 1.5, "top_k": 3})  # fmt: skip


def attributes(tmp: Path) -> Case:
    rng = np.random.default_rng(3)
    attr = {u: {"interest": float(rng.integers(0, 3)), "age": float(rng.integers(0, 4))} for u in USERS}
    layout, ids, owners, rng = population(tmp, lambda k, o: {f"attr-{c}": v for c, v in attr[o].items()})
    columns = np.asarray(["interest", "age"])
    truth = {c: np.asarray([attr[o][c] for o in owners]) for c in columns}

    def build(rows: np.ndarray, cls: np.ndarray) -> Outputs:
        out = {"ids": ids[rows], "columns": columns[cls], "stl_id": owners[rows]}
        for c in columns[cls]:
            out |= {f"values/{c}": np.unique(truth[c]), f"stl_attr/{c}": truth[c][rows], f"mtl_attr/{c}": truth[c][rows],
                    f"mtl_id/{c}": owners[rows]}  # fmt: skip
        return out

    head = ("stl_attr", "mtl_attr", "stl_deanon", "mtl_deanon")
    return Case("attributes", layout, list(ids), build, N, len(columns), head, ("attr_chance", "deanon_chance"))


def property_(tmp: Path) -> Case:
    def has(k: int, o: str) -> bool:  # the holders' updates mostly hold the property, the others' rarely
        return (k % 6 != 0) if o in USERS[:2] else (k % 6 == 0)

    facts = lambda k, o: {"has-property": int(has(k, o)), "property-fraction": 0.5 * has(k, o)}  # noqa: E731
    layout, ids, owners, rng = population(tmp, facts)
    held = np.asarray([has(k, o) for k, o in enumerate(owners)])
    scores = 0.6 * held + 0.8 * rng.random(N)  # each update's score beats three quarters of the other side's, at worst

    def build(rows: np.ndarray, cls: np.ndarray) -> Outputs:
        return {"ids": ids[rows], "scores": scores[rows]}

    return Case("property", layout, list(ids), build, N, 0, ("auc", "dataset_auc"), ("positive_share",), {"holder_rate": 0.2})


def aggregate_property(tmp: Path) -> Case:
    updates = [Update(f"r{r}-{k}", f"user{k}", r, {"has-property": int(r % 2 == 0 and k == 0)})
               for r in range(1, 13) for k in range(3)]  # fmt: skip
    layout = write_run(tmp, updates)
    rounds = np.arange(1, 13)
    scores = 0.6 * (rounds % 2 == 0) + 0.8 * np.random.default_rng(4).random(12)

    def build(rows: np.ndarray, cls: np.ndarray) -> Outputs:
        return {"rounds": rounds[rows], "scores": scores[rows]}

    return Case("aggregate-property", layout, [u.uid for u in updates], build, 12, 0, ("auc",), ("with_property",))


def membership(tmp: Path) -> Case:
    rng = np.random.default_rng(8)
    private = [rng.integers(1, 50, 6) for _ in range(48)]
    held = [rng.integers(50, 100, 6) for _ in range(48)]  # tokens no batch holds: never a member
    batches = [private[4 * k : 4 * k + 4] for k in range(12)]
    ids = [f"m{k}" for k in range(12)]
    updates = [Update(i, "user0", 1, {"batch-records": [record_hash(x) for x in b]}) for i, b in zip(ids, batches, strict=True)]
    layout = write_run(tmp, updates)
    fed = SimpleNamespace(user_ids=["user0"], private=lambda pid: SimpleNamespace(x=private, y=[0] * 48),
                          splits={"user0": SimpleNamespace(test=SimpleNamespace(x=held, y=[0] * 48))})  # fmt: skip
    vocab = np.zeros((12, 128), bool)
    for k, b in enumerate(batches):
        vocab[k, np.concatenate(b)] = True
    packed = np.packbits(vocab, axis=1)

    def build(rows: np.ndarray, cls: np.ndarray) -> Outputs:
        return {"ids": np.asarray(ids)[rows], "rounds": np.ones(int(rows.sum()), np.int64), "vocab": packed[rows],
                "vocab_size": np.asarray(128)}  # fmt: skip

    return Case("membership", layout, ids, build, 12, 0, ("precision", "recall"), ("chance",), federation=fed)


def reconstruction(tmp: Path) -> Case:
    """Rows are attacked updates (which updates it attacks is the attack's, reported as coverage: not drawn here);
    the classes are the reconstructed samples: 4 updates of 3 samples, reconstructed exactly."""
    rng = np.random.default_rng(9)
    images = [rng.random((1, 4, 4)).astype(np.float32) for _ in range(12)]
    props = (np.arange(12) % 2).astype(np.int64)
    labels = (np.arange(12) % 3).astype(np.int64)
    ids = [f"p{k}" for k in range(4)]
    batch = {i: list(range(3 * k, 3 * k + 3)) for k, i in enumerate(ids)}
    updates = [Update(i, "user0", 1, {"batch-records": [record_hash(images[s]) for s in batch[i]],
                                      "batch-properties": [int(props[s]) for s in batch[i]]}) for i in ids]  # fmt: skip
    layout = write_run(tmp, updates)
    prior = SimpleNamespace(x=np.full((6, 1, 4, 4), 0.5, np.float32), y=np.arange(6) % 3)
    fed = SimpleNamespace(user_ids=["user0"], private=lambda pid: SimpleNamespace(x=images, y=list(labels)),
                          corpus=SimpleNamespace(num_classes=3),
                          splits={"user0": SimpleNamespace(prior=prior, test=SimpleNamespace(x=[], y=[]))})  # fmt: skip

    def build(rows: np.ndarray, cls: np.ndarray) -> Outputs:
        keep = [[s for s in batch[i] if cls[s]] for i in ids]
        flat = [s for k in keep for s in k]
        return {"ids": np.asarray(ids), "rounds": np.ones(4, np.int64), "counts": np.asarray([len(k) for k in keep]),
                "steps": np.ones(4, np.int64), "batch_size": np.full(4, 3),
                "recon": np.stack([images[s].ravel() for s in flat]) if flat else np.zeros((0, 16), np.float32),
                "probs": np.asarray([0.9 if props[s] else 0.1 for s in flat], np.float32),
                "labels": labels[flat], "skipped": np.asarray(0), "space": np.asarray("pixels")}  # fmt: skip

    head = ("accuracy", "count_accuracy", "recovered", "psnr", "label_accuracy")
    chance = ("chance", "label_chance", "updates")
    return Case("reconstruction", layout, ids, build, 4, 12, head, chance, federation=fed, rows_drawn=False)


def linkage(tmp: Path) -> Case:
    layout, ids, owners, rng = population(tmp, lambda k, o: {"node": f"node-{o}"})
    knowledge_file(layout, list(USERS))
    nodes = np.asarray([f"node-{u}" for u in USERS])
    iu = np.triu_indices(N, 1)
    pair = (owners[iu[0]] == owners[iu[1]]) + 1.3 * rng.random(len(iu[0]))
    full = np.zeros((N, N))
    full[iu] = pair
    labels = np.searchsorted(USERS, owners)
    single = ranking(owners, USERS, rng)
    inter = ranking(np.asarray([f"node-{o}" for o in owners]), nodes, rng)

    def build(rows: np.ndarray, cls: np.ndarray) -> Outputs:
        sel = np.flatnonzero(rows)
        ju = np.triu_indices(len(sel), 1)
        pairs = full[sel[ju[0]], sel[ju[1]]]
        return {
            "ids": ids[sel], "cannot_link": np.asarray(False), "groups": np.asarray(K),
            **{f"pairs_{v}": pairs for v in VARIANTS}, **{f"labels_{v}": labels[sel] for v in VARIANTS},
            "single_attacker": np.asarray("mlp"), "single_classes": USERS[cls], "single_raw": single[np.ix_(sel, cls)],
            "single_linked": single[np.ix_(sel, cls)], "pseudonyms": nodes[cls],
            "inter_candidates": np.ones((len(sel), int(cls.sum()))), "inter_single": inter[np.ix_(sel, cls)],
            "inter_linked": inter[np.ix_(sel, cls)],
        }  # fmt: skip

    head = ("ap", "ari", "one_example.alone.ap", "one_example.alone.top1", "intersection.alone.ap", "intersection.alone.top1")
    return Case("linkage", layout, list(ids), build, N, K, head, ("chance_ap",))


def redteam(tmp: Path) -> Case:
    from leakbed.core.store import UpdateStore

    layout, ids, owners, rng = population(tmp)
    order = [str(i) for i in UpdateStore(layout.store(RULE)).anon_ids()]
    truth = dict(zip(ids, owners, strict=True))
    rounds = {str(i): 1 + k % 3 for k, i in enumerate(ids)}

    def build(rows: np.ndarray, cls: np.ndarray) -> Outputs:
        keep = dict(zip(ids, rows, strict=True))
        probe = {"owner": [truth[i] if keep[i] else "" for i in order], "round": [rounds[i] if keep[i] else -1 for i in order],
                 "evidence": ["all of it"]}  # fmt: skip
        return {"found": np.asarray(json.dumps({"probes": {"cheat": probe}, "breakout": {}}))}

    return Case("redteam", layout, list(ids), build, N, 0, ("best_owner_accuracy", "best_round_accuracy"), ("owner_chance",))


CASES: dict[str, Callable[[Path], Case]] = {
    "reid": reid, "metadata": metadata, "open-world": open_world, "matching": matching, "cross-modal": cross_modal,
    "profile": profile, "attributes": attributes, "property": property_, "aggregate-property": aggregate_property,
    "membership": membership, "reconstruction": reconstruction, "linkage": linkage, "redteam": redteam,
}  # fmt: skip
