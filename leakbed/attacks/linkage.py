"""Linkage across rounds without prior (suite name ``linkage``): which anonymous updates came from one
user, and what that buys an attacker who knows little or who knows whom it sampled.

Seed 001 §3 assumes the shuffler leaves nothing but Δw; §4.3's matching attack links updates with a
Siamese network trained on prior data. This one needs no prior to link: from the stream alone it
groups updates by what they carry besides the weights (``attacks.metadata``'s fields: n_k, which a
device reports the same every round; the Δw norm z-scored within its round; sparsity; size), by the
Δw itself (cosine distance after removing each round's mean update, which every device of a round
shares through the global model), and by both (the two distances, each divided by its median,
summed). Two updates of one round never come from one device, so such pairs are kept apart, unless
the stream shows batching (more updates released in a round than were sampled in it). The grouping
is average-linkage agglomerative clustering into as many groups as there are nodes (the server
knows how many it serves).

Then two uses of linking:
- a prior-limited attacker (seed 001 Fig. 7's single prior example): shadow updates from one prior
  example per user, the first closed-world attacker trained on them; each update is scored alone,
  and with linking, by the mean log-posterior of its group.
- the intersection attack: the server knows which nodes it sent each round's task to. Here it tells
  the attack side, as per-run keyed pseudonyms (``referee.seal.Sealer.pseudonym``: a keyed hash
  under the run's secret update-id key, never a raw node or user id), in the round's training
  config (``sampled``). An update released in round R came from a node sampled in the rounds since
  the previous release; a linked group came from a node in all its updates' candidate sets. Each
  group scores each pseudonym by the share of its updates whose candidates hold it. Shuffler
  batching (``shuffler.batch_min``) widens every candidate set to the union of several rounds'
  samples, which is the setting that defeats it.

Threat model: the honest-but-curious server (seed 001 §4.1) plus what it knows as the protocol's
coordinator: whom it sampled each round (pseudonyms only) and how many nodes it serves. It receives
anonymous updates (id, release round, normalised Δw of the attack layers, n_k, norm, sparsity,
bytes), the round's global model and training config, and its prior data; never truth, raw node ids
or arrival order. Only the one-example re-identification reads the prior.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import numpy as np
from scipy.spatial.distance import pdist, squareform
from sklearn.cluster import AgglomerativeClustering

from leakbed.attacks.contract import Attack, AttackContext, Needs, Outputs
from leakbed.attacks.metadata import reid_scores, weight_logpost
from leakbed.attacks.shadow import shadow_updates
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.linkage_views import VARIANTS
from leakbed.core.rankings import group_mean, tie_break
from leakbed.core.records import RoundSnapshot

NAME = "linkage"
FOLDER = "linkage"  # the attack's own files in the store: participation and one-example shadow updates
MAX_UPDATES = 2000  # pairwise distances are O(N²): beyond this a seeded sample of updates is linked


def _atomic(path: Path, write) -> None:  # noqa: ANN001 - a callable taking the temp path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


def one_example_prior(knowledge: AttackerKnowledge) -> AttackerKnowledge:
    """The same attacker holding a single prior example per user (a seeded pick)."""
    one = {}
    for u, d in knowledge.prior.items():
        k = int(np.random.default_rng([knowledge.seed, zlib.crc32(u.encode())]).integers(len(d)))
        one[u] = d.take(np.asarray([k]))
    return replace(knowledge, prior=one)


def on_round(folder: Path, knowledge: AttackerKnowledge, snap: RoundSnapshot) -> None:
    """Keep the round's participation (as the server shared it) and train the one-example shadow updates, in the
    attack's own folder."""
    doc = {"participants": int(snap.train_config.get("participants", 0)), "sampled": str(snap.train_config.get("sampled", ""))}
    folder = folder / FOLDER
    _atomic(folder / f"r{snap.round:06d}.json", lambda p: p.write_text(json.dumps(doc), encoding="utf-8"))
    labels, vectors = shadow_updates(one_example_prior(knowledge), snap)

    def save(path: Path) -> None:
        with path.open("wb") as f:
            np.savez(f, labels=np.asarray(labels), vectors=vectors)

    _atomic(folder / f"shadow1-r{snap.round:06d}.npz", save)


def _participation(folder: Path) -> dict[int, dict]:
    return {int(f.stem[1:]): json.loads(f.read_text(encoding="utf-8")) for f in sorted((folder / FOLDER).glob("r*.json"))}


def _standardise(x: np.ndarray) -> np.ndarray:
    sd = x.std(axis=0)
    keep = sd > 1e-12
    return (x[:, keep] - x[:, keep].mean(axis=0)) / sd[keep] if keep.any() else np.zeros((len(x), 1))


def meta_features(counts: np.ndarray, meta: dict[str, np.ndarray], rounds: np.ndarray) -> np.ndarray:
    """Standardised (log n_k, log norm z-scored within the round, sparsity, log bytes); constant columns dropped."""
    norms = np.where(np.isfinite(meta["norm"]) & (meta["norm"] > 0), meta["norm"], 1.0)
    z = np.log(norms)
    for r in np.unique(rounds):
        sel = rounds == r
        sd = z[sel].std()
        z[sel] = (z[sel] - z[sel].mean()) / sd if sd > 1e-12 else 0.0
    cols = [
        np.log(np.maximum(counts, 1)),
        z,
        np.nan_to_num(meta["sparsity"]),
        np.log(np.maximum(np.nan_to_num(meta["nbytes"]), 1)),
    ]
    return _standardise(np.stack(cols, axis=1))


def centred_directions(vectors: np.ndarray, rounds: np.ndarray) -> np.ndarray:
    """Each update minus its round's mean update (the global model's common pull), L2-normalised."""
    out = np.asarray(vectors, np.float64).copy()
    for r in np.unique(rounds):
        sel = rounds == r
        if sel.sum() > 1:
            out[sel] -= out[sel].mean(axis=0)
    n = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(n > 0, n, 1.0)


def distances(feat_meta: np.ndarray, directions: np.ndarray) -> dict[str, np.ndarray]:
    """Square distance matrices of the three views."""
    d_meta = squareform(pdist(feat_meta))
    d_w = squareform(np.clip(pdist(directions, "cosine"), 0.0, 2.0)) if len(directions) > 1 else np.zeros((1, 1))

    def scaled(d: np.ndarray) -> np.ndarray:
        off = d[np.triu_indices(len(d), 1)]
        med = float(np.median(off)) if off.size else 0.0
        return d / med if med > 0 else d

    return {"meta": d_meta, "w": d_w, "both": scaled(d_meta) + scaled(d_w)}


def cluster(d: np.ndarray, groups: int) -> np.ndarray:
    """Average-linkage agglomerative clustering of a precomputed distance matrix into ``groups``."""
    if len(d) < 2:
        return np.zeros(len(d), np.int64)
    k = int(min(max(groups, 1), len(d)))
    return AgglomerativeClustering(n_clusters=k, metric="precomputed", linkage="average").fit_predict(d)


def candidates(rounds: np.ndarray, part: dict[int, dict], names: list[str]) -> np.ndarray:
    """1 where a pseudonym was sampled in the rounds since the previous release, up to an update's release round."""
    col = {p: j for j, p in enumerate(names)}
    releases = sorted(np.unique(rounds).tolist())
    out = np.zeros((len(rounds), len(names)))
    prev = 0
    for r in releases:
        window = set()
        for q in range(prev + 1, r + 1):
            window |= {p for p in part.get(q, {}).get("sampled", "").split(",") if p}
        idx = [col[p] for p in window]
        out[np.ix_(rounds == r, idx)] = 1.0
        prev = r
    return out


def link(ctx: AttackContext) -> Outputs:
    store, knowledge = ctx.store, ctx.knowledge
    anon, meta = store.read_anon(), store.read_anon_meta()
    n = len(anon["ids"])
    keep = np.arange(n)
    if n > MAX_UPDATES:
        keep = np.sort(np.random.default_rng([knowledge.seed, 0x11AC]).choice(n, MAX_UPDATES, replace=False))
    ids, rounds = anon["ids"][keep], np.asarray(anon["round"], np.int64)[keep]
    counts = np.asarray(anon["num_examples"], np.int64)[keep]
    meta = {k: v[keep] for k, v in meta.items()}
    vectors = anon["vectors"][keep]
    part = _participation(ctx.folder)
    names = sorted({p for doc in part.values() for p in doc["sampled"].split(",") if p})
    per_round = {r: int((rounds == r).sum()) for r in np.unique(rounds)}
    cannot_link = bool(part) and all(c <= part.get(int(r), {}).get("participants", 0) for r, c in per_round.items())
    groups = len(names) if names else len(knowledge.prior)
    d = distances(meta_features(counts, meta, rounds), centred_directions(vectors, rounds))
    same_round = rounds[:, None] == rounds[None, :]
    np.fill_diagonal(same_round, False)
    out: dict[str, np.ndarray] = {
        "ids": ids,
        "rounds": rounds,
        "cannot_link": np.asarray(cannot_link),
        "groups": np.asarray(groups),
    }
    labels = {}
    for v in VARIANTS:
        dv = d[v].copy()
        if cannot_link:
            dv[same_round] = 2.0 * float(dv.max()) + 1.0
        iu = np.triu_indices(len(dv), 1)
        out[f"pairs_{v}"] = (-dv[iu]).astype(np.float32)
        labels[v] = cluster(dv, groups)
        out[f"labels_{v}"] = labels[v]
    # a prior-limited attacker: one prior example per user, with and without linking first
    files = sorted((ctx.folder / FOLDER).glob("shadow1-r*.npz"))
    reid = [n for n in ctx.upstream if ctx.peers.get(n, {}).get("builtin")]  # leakbed's own: run in this sandbox
    if files and reid:
        xs, ys = [], []
        for f in files:
            with np.load(f) as z:
                xs.append(z["vectors"])
                ys.append(z["labels"])
        name = reid[0]
        s = reid_scores(ctx, name, np.concatenate(xs), np.concatenate(ys), vectors)
        kind = ctx.peers[name].get("score_kind", "probability")
        out |= {
            "single_attacker": np.asarray(name),
            "single_classes": s.classes,
            "single_raw": tie_break(s.scores, knowledge.seed),
            "single_linked": group_mean(weight_logpost(kind, s.scores), labels["both"]),
        }
    # the intersection attack: participation sets joined with the linked groups
    if names:
        cand = candidates(rounds, part, names)
        out |= {
            "pseudonyms": np.asarray(names),
            "inter_candidates": cand,
            "inter_single": tie_break(cand, knowledge.seed),
            "inter_linked": tie_break(group_mean(cand, labels["both"]) + 1e-3 * cand, knowledge.seed),
        }
    return out


class Linkage(Attack):
    name: ClassVar[str] = NAME
    needs = Needs(participation=True)
    source = "issue 12 (leakbed): seed 001 §3's shuffler assumption tested; §4.3 (linking), Fig. 7 (one prior example)"
    threat = (
        "the honest-but-curious server plus what it knows as the protocol's coordinator: whom it sampled each round "
        "(per-run keyed pseudonyms only) and how many nodes it serves; anonymous updates with their metadata, the "
        "round's global model and training config, and its prior data; never truth, raw node ids or arrival order"
    )
    scorer = "linkage"
    builds_on = ("family:reid",)

    def on_round(self, ctx: AttackContext, snapshot: RoundSnapshot) -> None:
        on_round(ctx.folder, ctx.knowledge, snapshot)

    def predict(self, ctx: AttackContext) -> Outputs:
        return link(ctx)
